"""REVIEWQUEUE_FAULTS (moderation.lab.faults): known points and actions only."""

import time

import pytest

from moderation.core import faults
from moderation.lab.faults import faults_install_from_setting


def test_fault_spec_from_settings_installs_known_points_only():
    with pytest.raises(ValueError, match="unknown fault point"):
        faults_install_from_setting("after_lunch:kill")
    with pytest.raises(ValueError, match="unknown fault action"):
        faults_install_from_setting("after_row_lock:explode")
    faults_install_from_setting("after_row_lock:sleep=0.01")
    try:
        start = time.monotonic()
        faults.fault_point("after_row_lock", item_key="k")
        assert time.monotonic() - start >= 0.01
    finally:
        faults._actions.clear()
