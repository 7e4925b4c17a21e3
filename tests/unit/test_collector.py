"""A serving process freezes what start-up made and collects rarely (`tune_for_serving`); run in
a process of its own, since a frozen object is never collected."""

import subprocess
import sys

PROBE = (
    "import gc; from bloom.web.collector import tune_for_serving; "
    "before = gc.get_freeze_count(); tune_for_serving(); "
    "print(gc.get_threshold(), before == 0 < gc.get_freeze_count())"
)


def test_a_serving_process_freezes_its_start_up_and_collects_rarely():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "(50000, 50, 100) True"
