import json

import torch

from edgespec.corpus.distill import distill, done_ids
from edgespec.corpus.prompts import Prompt, read_jsonl_pairs
from edgespec.runtime.generate import generate


def _step(tokens, pos):
    logits = torch.zeros(10)
    logits[(int(tokens[0, -1]) + 1) % 10] = 1.0  # next token = last + 1 (9 -> 0 = eos)
    return logits


def _respond(ids):
    res = generate(_step, ids, max_new_tokens=20, max_seq_len=64, eos_ids=(0,))
    return res.completion_ids, res.stopped_by_eos


def test_distill_appends_and_resumes(tmp_path):
    out = tmp_path / "d.jsonl"
    prompts = [Prompt(f"p{i}", "math", str(i)) for i in range(4)]
    enc = lambda text: [int(text)]  # noqa: E731
    s1 = distill(_respond, enc, prompts[:2], out, max_seq_len=64, eos_ids=(0,))
    assert s1["new_sequences"] == 2
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["prompt_ids"] == [0] and rows[0]["response_ids"] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]
    with open(out, "a") as f:
        f.write('{"id": "p2", "torn')  # a crash mid-line
    s2 = distill(_respond, enc, prompts, out, max_seq_len=64, eos_ids=(0,))
    assert s2["new_sequences"] == 2 and s2["skipped_existing"] == 2
    assert done_ids(out) == {"p0", "p1", "p2", "p3"}


def test_read_jsonl_pairs_reports_the_bad_line(tmp_path):
    import pytest

    from edgespec.errors import EdgespecError

    p = tmp_path / "u.jsonl"
    p.write_text('{"prompt": "a", "response": "b"}\n{"prompt": "c"}\n')
    it = read_jsonl_pairs(p)
    assert next(it) == ("a", "b")
    with pytest.raises(EdgespecError, match=":2:"):
        next(it)


def test_distill_workers_share_the_cpus_this_process_may_use(monkeypatch):
    from edgespec import host
    from edgespec.corpus.distill import worker_threads

    monkeypatch.setattr(host.os, "cpu_count", lambda: 64)  # the machine's, not this process's
    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(host, "cgroup_cpu_quota", lambda *a: None)
    assert worker_threads(1) == 4 and worker_threads(2) == 2 and worker_threads(8) == 1
    monkeypatch.setattr(host, "cgroup_cpu_quota", lambda *a: 2)  # a container's cpu.max
    assert worker_threads(1) == 2
    monkeypatch.delattr(host.os, "sched_getaffinity")  # macOS: no affinity mask
    monkeypatch.setattr(host, "cgroup_cpu_quota", lambda *a: None)
    assert worker_threads(1) == 64


def test_cgroup_v2_cpu_quota_is_the_tightest_on_the_path(tmp_path):
    from edgespec.host import cgroup_cpu_quota

    root, proc = tmp_path / "cgroup", tmp_path / "proc_self_cgroup"
    (root / "a" / "b").mkdir(parents=True)
    proc.write_text("0::/a/b\n")
    assert cgroup_cpu_quota(root, proc) is None  # no cpu.max anywhere
    for d in (root, root / "a", root / "a" / "b"):
        (d / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(root, proc) is None  # no quota
    (root / "a" / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs on the parent: 2 threads
    assert cgroup_cpu_quota(root, proc) == 2
    (root / "a" / "b" / "cpu.max").write_text("50000 100000\n")
    assert cgroup_cpu_quota(root, proc) == 1
    proc.write_text("4:cpu,cpuacct:/a/b\n")  # cgroup v1 only
    assert cgroup_cpu_quota(root, proc) is None
    assert cgroup_cpu_quota(root, tmp_path / "missing") is None
