"""One run at a time in a run directory: a second run there is refused, a dead holder's lock is taken over."""

import json
import os
import socket
import subprocess
import sys

import pytest

from rlvr.run_lock import LOCK, RunDirBusy, run_dir_lock


def hold(path, pid, host=None):
    path.mkdir(parents=True, exist_ok=True)
    (path / LOCK).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(), "started": "then"}))


@pytest.fixture
def other():
    """A live process that is not this one."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p.pid
    p.kill()
    p.wait()


def test_a_live_holder_refuses_a_second_run_and_keeps_its_lock(tmp_path, other):
    hold(tmp_path, other)
    with pytest.raises(RunDirBusy, match=rf"in use by process {other} \(since then\).*another --run-dir"):
        with run_dir_lock(tmp_path):
            pass
    assert json.loads((tmp_path / LOCK).read_text())["pid"] == other


def test_a_dead_holders_lock_is_taken_over_and_released(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # its pid is free now
    hold(tmp_path, p.pid)
    with run_dir_lock(tmp_path):
        assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
        with run_dir_lock(tmp_path):  # nested in the holder's own process: allowed
            pass
        assert (tmp_path / LOCK).exists()  # the nested block does not release the outer one's lock
    assert not (tmp_path / LOCK).exists()


def test_a_lock_from_another_host_is_refused_with_the_file_to_remove(tmp_path):
    hold(tmp_path, 1, host="elsewhere")
    with pytest.raises(RunDirBusy, match=rf"process 1 on elsewhere.*remove {tmp_path / LOCK}"):
        with run_dir_lock(tmp_path):
            pass


def test_rlvr_run_in_a_busy_run_dir_is_one_line_before_any_work(tiny_dir, tmp_path, rlvr_cli, other):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: t\nrun_dir: {tmp_path / 'run'}\nmodel: {{path: {tiny_dir}}}\neval_base: false\n"
                      "stages:\n  - {type: sft, max_steps: 2, batch_size: 4, micro_batch_size: 4, "
                      "data: {families: [add2], n: 8}}\n")
    hold(tmp_path / "run", other)
    code, _, err = rlvr_cli("run", recipe)
    assert code == 2 and f"in use by process {other}" in err and "Traceback" not in err, err
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [LOCK]  # nothing else written
