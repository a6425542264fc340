"""The diagnosis of one pod: the evidence (:mod:`.evidence`), the rules that judge it
(:mod:`.judge`, with :mod:`.growth` and :mod:`.causes`), the diagnosis they give
(:mod:`.verdict`) and its text (:mod:`.text`). The model imports no renderer; the
renderer reads the model.
"""

from exporter.oncall.diagnosis.evidence import (
    CgroupEvidence,
    Evidence,
    KillEvidence,
    KvEvidence,
    ProcessEvidence,
    TmpfsEvidence,
    Trend,
)
from exporter.oncall.diagnosis.judge import diagnose
from exporter.oncall.diagnosis.verdict import (
    AT_RISK,
    HEALTHY,
    NO_DATA,
    RUNBOOK_BASE,
    Diagnosis,
)

__all__ = [
    "AT_RISK", "HEALTHY", "NO_DATA", "RUNBOOK_BASE", "CgroupEvidence", "Diagnosis",
    "Evidence", "KillEvidence", "KvEvidence", "ProcessEvidence", "TmpfsEvidence", "Trend",
    "diagnose",
]
