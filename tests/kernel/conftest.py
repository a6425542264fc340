"""What the kernel tier's tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter.assembly.factory import Exporter
from tests.helpers.kernel import KubeTree, kube_tree, need_kernel


@pytest.fixture
def tree() -> Iterator[KubeTree]:
    """A kube-shaped tree of real memory cgroups beneath this test's own; the test is
    skipped where the kernel tier cannot run."""
    need_kernel()
    with kube_tree() as t:
        yield t


@pytest.fixture
def pipelines(make_pipeline: list[Exporter]) -> list[Exporter]:
    """The exporters a test starts, closed after it (tests/conftest.py's make_pipeline)."""
    return make_pipeline
