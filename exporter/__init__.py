"""headroom: see which memory will OOMKill a vLLM pod, before the kernel does."""

__version__ = "0.1.0"
