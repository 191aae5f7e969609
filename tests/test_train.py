"""Drafter training on tiny random models: target alignment, learning, resume, DDP."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edgespec.config import DrafterConfig, TrainConfig
from edgespec.errors import EdgespecError
from edgespec.speculative.features import FeatureCache
from edgespec.speculative.loss import DraftLoss
from edgespec.speculative.streams import StreamParams, StreamsModel
from edgespec.speculative.train import train_drafter
from edgespec.speculative.train_data import TrainExample, epoch_order, make_batch


def test_make_batch_targets_are_future_response_tokens():
    ex = [TrainExample([10, 11, 12, 13, 14, 15], n_prompt=3), TrainExample([20, 21, 22, 23], n_prompt=2)]
    feats = [torch.zeros(6, 4), torch.zeros(4, 4)]
    tokens, h0, main_t, stream_t, soft_ids, soft_p = make_batch(ex, feats, [0, 1], depth=2)
    assert soft_ids is None and soft_p is None  # hard labels only
    # seq 0: response = 13, 14, 15 (positions 3..5)
    assert main_t[0].tolist() == [-100, -100, 13, 14, 15, -100]
    assert stream_t[0, :, 0].tolist() == [-100, 13, 14, 15, -100, -100]
    assert stream_t[0, :, 1].tolist() == [13, 14, 15, -100, -100, -100]
    assert tokens[1].tolist() == [20, 21, 22, 23, 0, 0]
    assert stream_t[1, :, 1].tolist() == [23, -100, -100, -100, -100, -100]  # t + 3 = 3


def test_soft_labels_align_with_stream_targets():
    """Row r of an example's top-K predicts tokens[n_prompt + r]: it must sit where the stream
    target is that token."""
    resp = [13, 14, 15]
    ids = torch.tensor([[t, t + 50] for t in resp], dtype=torch.int32)  # top-1 = the response token
    p = torch.tensor([[0.75, 0.25]] * 3, dtype=torch.float16)
    ex = [TrainExample([10, 11, 12, *resp], n_prompt=3, topk_ids=ids, topk_p=p), TrainExample([20, 21, 22, 23], n_prompt=2)]
    tokens, h0, main_t, stream_t, soft_ids, soft_p = make_batch(ex, [torch.zeros(6, 4), torch.zeros(4, 4)], [0, 1], depth=2)
    assert soft_ids.shape == (2, 6, 3, 2)  # index 0: the main target, 1 + j: stream j
    targets = torch.cat([main_t[..., None], stream_t], -1)
    has = soft_p.sum(-1) > 0
    assert not (has & (targets == -100)).any()  # soft labels only where there is a target
    assert torch.equal(has[0], targets[0] != -100)  # and every target of an example with them has one
    assert not has[1].any()  # the second example has none
    assert torch.equal(soft_ids[0][has[0]][:, 0], targets[0][has[0]])
    torch.testing.assert_close(soft_p[0][has[0]], torch.tensor([[0.75, 0.25]]).expand(int(has[0].sum()), 2))


def test_soft_weight_mixes_in_the_teachers_top_k(tiny_model):
    spec = StreamsModel(tiny_model, StreamParams(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))))
    g = torch.Generator().manual_seed(0)
    ex = []
    for _ in range(4):
        toks = torch.randint(0, 97, (12,), generator=g).tolist()
        R = 12 - 4
        ids = torch.stack([torch.tensor(toks[4:]), torch.randint(0, 97, (R,), generator=g)], 1).to(torch.int32)
        ex.append(TrainExample(toks, 4, ids, torch.tensor([[0.5, 0.5]] * R, dtype=torch.float16)))
    batch = make_batch(ex, FeatureCache(spec, ex).h, [0, 1, 2, 3], depth=2)

    def loss(b):
        hp = TrainConfig(depth_weights=(1.0, 1.0), soft_weight=b, bf16=False)
        with torch.no_grad():
            return float(DraftLoss(spec, hp)(*batch)[0])

    hard, soft, half = loss(0.0), loss(1.0), loss(0.5)
    assert hard != pytest.approx(soft)
    assert half == pytest.approx((hard + soft) / 2, rel=1e-5)
    # soft = the cross-entropy against 0.5 / 0.5 over the two listed tokens: compute it directly
    with torch.no_grad():
        _, stream_h = spec.forward_train(batch[0], batch[1])
        total = 0.0
        for j in range(2):
            keep = batch[3][:, :, j] != -100
            logq = torch.log_softmax(tiny_model.output(stream_h[:, :, j][keep]).float(), -1).gather(1, batch[4][:, :, 1 + j][keep])
            total += float(-(0.5 * logq).sum(-1).mean())
    assert soft == pytest.approx(total, rel=1e-5)


def test_shared_mode_main_loss_keeps_the_original_models_distribution(tiny_model):
    """In shared mode the main stream's loss mixes the teacher's top-K (the original model's
    distribution: the KL term) with the hard next token, like each stream's."""
    spec = StreamsModel(tiny_model, StreamParams(tiny_model, DrafterConfig(draft_depth=1, n_layers=1, lora_rank=4, mode="shared", tree=(1,))))
    g = torch.Generator().manual_seed(2)
    ex = []
    for _ in range(3):
        toks = torch.randint(0, 97, (11,), generator=g).tolist()
        ids = torch.stack([torch.tensor(toks[4:]), torch.randint(0, 97, (7,), generator=g)], 1).to(torch.int32)
        ex.append(TrainExample(toks, 4, ids, torch.tensor([[0.25, 0.75]] * 7, dtype=torch.float16)))
    batch = make_batch(ex, FeatureCache(spec, ex).h, [0, 1, 2], depth=1)

    def main_term(b):  # total minus the stream's term (stream weight 1), and the main loss reported
        with torch.no_grad():
            total, main, per_stream, _ = DraftLoss(spec, TrainConfig(depth_weights=(1.0,), main_weight=1.0, soft_weight=b, bf16=False))(*batch)
        assert float(main) == pytest.approx(float(total - per_stream.sum()), rel=1e-5)
        return float(main)

    with torch.no_grad():
        main_h, _ = spec.forward_train(batch[0], batch[1])
        keep = batch[2] != -100
        logq = torch.log_softmax(tiny_model.output(main_h[keep]).float(), -1)
        hard = float(torch.nn.functional.cross_entropy(logq, batch[2][keep]))
        soft = float(-(torch.tensor([0.25, 0.75]) * logq.gather(1, batch[4][:, :, 0][keep])).sum(-1).mean())
    assert main_term(0.0) == pytest.approx(hard, rel=1e-5)
    assert main_term(1.0) == pytest.approx(soft, rel=1e-5)
    assert main_term(0.5) == pytest.approx((hard + soft) / 2, rel=1e-5)


def test_draft_vocabulary_loss_is_the_cross_entropy_over_the_slice(tiny_model):
    """With draft ids the streams' loss is CE over the slice of the lm head, targets outside
    it are left out of the loss and count as misses; all ids = the full-vocabulary loss."""
    spec = StreamsModel(tiny_model, StreamParams(tiny_model, DrafterConfig(draft_depth=1, n_layers=1, lora_rank=4, tree=(1,))))
    g = torch.Generator().manual_seed(1)
    ex = [TrainExample(torch.randint(0, 97, (10,), generator=g).tolist(), 3) for _ in range(3)]
    batch = make_batch(ex, FeatureCache(spec, ex).h, [0, 1, 2], depth=1)
    hp = TrainConfig(depth_weights=(1.0,), bf16=False)
    with torch.no_grad():
        full, _, _, full_acc = DraftLoss(spec, hp)(*batch)
        same, _, _, same_acc = DraftLoss(spec, hp, torch.arange(97))(*batch)
        ids = torch.arange(0, 97, 2)  # even tokens only
        part, _, _, part_acc = DraftLoss(spec, hp, ids)(*batch)
        _, stream_h = spec.forward_train(batch[0], batch[1])
        keep = batch[3][:, :, 0] != -100
        tgt = batch[3][:, :, 0][keep]
        logits = stream_h[:, :, 0][keep] @ tiny_model.output.weight[ids].T
        inside = tgt % 2 == 0
        want = torch.nn.functional.cross_entropy(logits[inside], tgt[inside] // 2)
        want_acc = ((ids[logits.argmax(-1)] == tgt) & inside).float().mean()
    assert float(same) == pytest.approx(float(full), rel=1e-5) and float(same_acc) == float(full_acc)
    assert 0 < int(inside.sum()) < len(tgt)
    assert float(part) == pytest.approx(float(want), rel=1e-5)
    assert float(part_acc[0]) == pytest.approx(float(want_acc))


def _periodic_examples(n=24, period=1, vocab=97):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        base = torch.randint(0, vocab, (period,), generator=g).tolist()
        out.append(TrainExample((base * 8)[:30], n_prompt=6))
    return out


def test_streams_learn_a_predictable_sequence(tiny_model, tmp_path):
    """On repeated-token sequences the future is predictable: stream accuracy must rise."""
    spec = StreamsModel(tiny_model, StreamParams(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=8, tree=(1, 1))))
    ex = _periodic_examples()
    feats = FeatureCache(spec, ex).h
    hp = TrainConfig(steps=60, batch_size=8, lr=1e-2, warmup_steps=5, checkpoint_every=30, depth_weights=(1.0, 1.0), bf16=False)
    log = train_drafter(spec, ex, feats, hp, tmp_path)
    first = sum(log.loss[:5]) / 5
    last = sum(log.loss[-5:]) / 5
    assert last < 0.75 * first, (first, last)
    assert min(log.depth_acc[-1]) > 0.5
    assert json.loads((tmp_path / "log.json").read_text())["steps"][-1] == 60


class _Killed(Exception):
    pass


def _run(tiny_model, ex, d, steps=10, lr=1e-3, stop_at=None, kind="streams"):
    from edgespec.speculative.drafters import new_drafter

    torch.manual_seed(0)
    spec = new_drafter(tiny_model, DrafterConfig(kind=kind, draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1)))
    hp = TrainConfig(steps=steps, batch_size=4, lr=lr, warmup_steps=2, checkpoint_every=5, depth_weights=(1.0, 1.0), bf16=False)

    def on_step(step, log):
        if step == stop_at:
            raise _Killed

    return train_drafter(spec, ex, FeatureCache(spec, ex).h, hp, d, on_step=on_step), spec


@pytest.mark.parametrize("kind", ["streams", "eagle"])
def test_killed_run_resumes_to_the_uninterrupted_weights(tiny_model, tmp_path, kind):
    ex = _periodic_examples()
    full, spec_full = _run(tiny_model, ex, tmp_path / "a", kind=kind)
    with pytest.raises(_Killed):  # killed after step 7: the checkpoint on disk is step 5's
        _run(tiny_model, ex, tmp_path / "b", stop_at=7, kind=kind)
    resumed, spec_res = _run(tiny_model, ex, tmp_path / "b", kind=kind)
    assert resumed.steps == list(range(1, 11))
    # equal up to multithreaded float reduction order
    torch.testing.assert_close(torch.tensor(resumed.loss[5:]), torch.tensor(full.loss[5:]), atol=1e-2, rtol=1e-3)
    for (name, a), b in zip(spec_full.params.state_dict().items(), spec_res.params.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3, msg=name)


def test_a_run_resumes_on_another_machine_from_its_portable_checkpoint(tiny_model, tmp_path):
    """Only resume.pt (bf16 weights and optimizer state, what a long run commits) is carried to a
    new directory: the run resumes from its step and ends near the uninterrupted weights."""
    import shutil

    ex = _periodic_examples()
    full, spec_full = _run(tiny_model, ex, tmp_path / "a")
    with pytest.raises(_Killed):
        _run(tiny_model, ex, tmp_path / "b", stop_at=7)
    blob = torch.load(tmp_path / "b" / "resume.pt", weights_only=True)
    assert blob["step"] == 5 and all(t.dtype == torch.bfloat16 for t in blob["params"].values())
    steps = [s["step"] for s in blob["opt"]["state"].values()]
    assert all(t.dtype == torch.float32 and float(t) == 5 for t in steps)  # Adam's step counts stay exact
    (tmp_path / "c").mkdir()
    shutil.copy(tmp_path / "b" / "resume.pt", tmp_path / "c" / "resume.pt")
    resumed, spec_res = _run(tiny_model, ex, tmp_path / "c")
    assert resumed.steps == list(range(1, 11))
    for (name, a), b in zip(spec_full.params.state_dict().items(), spec_res.params.state_dict().values()):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2, msg=name)  # bf16 rounding of the carried state


def test_resume_refuses_a_checkpoint_of_another_recipe_or_data(tiny_model, tmp_path):
    ex = _periodic_examples()
    _run(tiny_model, ex, tmp_path, steps=5)  # a finished run
    with pytest.raises(EdgespecError, match="another base model, data or drafter/training settings"):
        _run(tiny_model, ex, tmp_path, steps=5, lr=2e-3)
    with pytest.raises(EdgespecError, match="train.out_dir"):
        _run(tiny_model, _periodic_examples(period=2), tmp_path, steps=5)
    log, _ = _run(tiny_model, ex, tmp_path, steps=5)  # the same run: the finished checkpoint is kept
    assert log.steps == [1, 2, 3, 4, 5]


def test_a_checkpoint_of_an_earlier_version_resumes_under_todays_names(tiny_model):
    """The loss log's per-depth accuracies were `stream_acc`, and the run fingerprint spells the
    renamed fields as then (`gamma`, `stream_weights`): the same run resumes across the rename."""
    import hashlib
    from dataclasses import asdict

    from edgespec.speculative.features import examples_digest, run_fingerprint, tensors_digest
    from edgespec.speculative.train import read_log

    log = read_log({"steps": [1], "loss": [2.0], "stream_acc": [[0.5, 0.25]], "tokens_seen": [7], "dev_stream_acc": [[0.5, 0.5]]})
    assert log.depth_acc == [[0.5, 0.25]] and log.dev_depth_acc == [[0.5, 0.5]]
    spec = StreamsModel(tiny_model, StreamParams(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))))
    ex, hp = _periodic_examples(), TrainConfig(depth_weights=(1.0, 0.5), bf16=False)
    skipped = (
        "data",
        "out_dir",
        "checkpoint_every",
        "dev_items",
        "dev_data",
        "lr_floor",
        "entry_lr",
        "depth_ramp_steps",
        "init",
    )  # the last four: added since, at their defaults
    settings = {("stream_weights" if k == "depth_weights" else k): v for k, v in asdict(hp).items() if k not in skipped}
    drafter = "DrafterConfig(kind='streams', mode='lossless', gamma=2, n_layers=1, lora_rank=4, f_rank=0, tree=(1, 1), weights='', draft_vocab=0)"
    blob = {"base": tensors_digest(tiny_model), "drafter": drafter, "vocab": None, "data": examples_digest(ex), "train": settings}
    assert run_fingerprint(spec, ex, hp) == hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


def test_feature_cache_batches_give_each_examples_own_features(tiny_model):
    spec = StreamsModel(tiny_model, StreamParams(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))))
    g = torch.Generator().manual_seed(3)
    ex = [TrainExample(torch.randint(0, 97, (int(n),), generator=g).tolist(), 2) for n in torch.randint(3, 30, (9,), generator=g)]
    batched = FeatureCache(spec, ex, batch_tokens=64).h
    for e, h in zip(ex, batched):
        alone = spec.lower_hidden(torch.tensor([e.tokens]))[0]
        assert h.shape == alone.shape and h.dtype == torch.bfloat16
        torch.testing.assert_close(h.float(), alone.to(torch.bfloat16).float(), atol=2e-2, rtol=2e-2)
    half = FeatureCache(spec, ex, bf16=True).h
    assert all(torch.allclose(a.float(), b.float(), atol=0.1, rtol=0.1) for a, b in zip(half, batched))


def test_feature_cache_is_rebuilt_for_other_data_or_model(tiny_model, tmp_path):
    spec = StreamsModel(tiny_model, StreamParams(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1))))
    path = tmp_path / "features.pt"
    ex = _periodic_examples()
    first = FeatureCache(spec, ex, path).h
    calls = []
    FeatureCache(spec, ex, path, on_progress=calls.append)
    assert calls == []  # same model and data: read from the file
    other = [TrainExample([t + 1 for t in e.tokens], e.n_prompt) for e in ex]  # same count and lengths
    rebuilt = FeatureCache(spec, other, path, on_progress=calls.append).h
    assert len(calls) == len(ex) and not torch.equal(rebuilt[0], first[0])
    with torch.no_grad():
        tiny_model.tok_embeddings.weight.mul_(2.0)
    calls.clear()
    FeatureCache(spec, other, path, on_progress=calls.append)
    assert len(calls) == len(ex)


def _run_ok(cmd: list[str], env: dict[str, str]) -> None:
    """Run cmd; on a non-zero exit fail with the tail of its output (the worker's traceback)."""
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd[2:4])} exited {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}"


def test_torchrun_two_processes_match_single_process(tmp_path):
    """DDP (gloo, 2 ranks x batch 4) takes the same examples per step as 1 process x batch 8."""
    worker = Path(__file__).parent / "ddp_worker.py"
    # Loopback only: the rendezvous address and gloo's interface would otherwise come from the
    # host name, which a CI container may not resolve to a bindable address.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    _run_ok([sys.executable, str(worker), str(tmp_path / "single"), "8"], env)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--local-addr", "127.0.0.1", "--nproc_per_node", "2"]
    _run_ok([*torchrun, str(worker), str(tmp_path / "ddp"), "4"], env)
    single = torch.load(tmp_path / "single" / "params.pt")
    ddp = torch.load(tmp_path / "ddp" / "params.pt")
    for k in single:
        torch.testing.assert_close(ddp[k], single[k], atol=2e-4, rtol=1e-3)
    ls = json.loads((tmp_path / "single" / "loss.json").read_text())
    ld = json.loads((tmp_path / "ddp" / "loss.json").read_text())  # rank 0's half-batch loss
    assert abs(sum(ls[-4:]) - sum(ld[-4:])) / sum(ls[-4:]) < 0.1


def test_epoch_order_is_a_permutation_with_similar_lengths_per_batch():
    lengths = [int(x) for x in torch.randint(10, 400, (100,), generator=torch.Generator().manual_seed(0))]
    order = epoch_order(lengths, 4, 5, torch.Generator().manual_seed(1))
    assert sorted(order) == list(range(100))
    assert order == epoch_order(lengths, 4, 5, torch.Generator().manual_seed(1))  # a function of the seed
    spread = lambda o: sum(max(lengths[i] for i in o[j : j + 4]) - min(lengths[i] for i in o[j : j + 4]) for j in range(0, 100, 4))  # noqa: E731
    plain = epoch_order(lengths, 4, 1, torch.Generator().manual_seed(1))
    assert spread(order) < spread(plain) / 2


@pytest.mark.parametrize("mode", ["shared", "lossless"])
def test_dev_split_is_scored_at_each_checkpoint_and_the_best_kept(tiny_model, tmp_path, mode):
    """With a dev set, every checkpoint logs its dev loss (and in shared mode the main
    stream's), best.pt holds the weights of the best one (shared: the lowest main-stream loss,
    the fine-tune being the product; lossless: the lowest training loss), and those weights
    score it again (the drafter a run hands out)."""
    from edgespec.speculative.drafters import new_drafter
    from edgespec.speculative.loss import DraftLoss
    from edgespec.speculative.train import DevSet, best_weights, dev_score

    torch.manual_seed(0)
    spec = new_drafter(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1), mode=mode))
    train_ex, dev_ex = _periodic_examples(period=3), _periodic_examples(n=8, period=5)
    hp = TrainConfig(steps=12, batch_size=4, lr=2e-2, warmup_steps=2, checkpoint_every=3, depth_weights=(1.0, 1.0), bf16=False)
    dev = DevSet(dev_ex, FeatureCache(spec, dev_ex).h)
    log = train_drafter(spec, train_ex, FeatureCache(spec, train_ex).h, hp, tmp_path, dev=dev)
    assert log.dev_steps == [3, 6, 9, 12] and len(log.dev_loss) == 4 and all(len(a) == 2 for a in log.dev_depth_acc)
    ranked = log.dev_main_loss if mode == "shared" else log.dev_loss
    assert len(ranked) == 4 and len(log.main_loss) == (12 if mode == "shared" else 0)
    loss_mod = DraftLoss(spec, hp)
    last = dev_score(loss_mod, dev, 2, 4)
    assert (last.main_loss if mode == "shared" else last.loss) == pytest.approx(ranked[-1], abs=1e-4)  # the last weights
    best = best_weights(tmp_path)
    assert best["step"] == log.dev_steps[ranked.index(min(ranked))]
    spec.params.load_state_dict(best["params"])
    again = dev_score(loss_mod, dev, 2, 4)
    assert (again.main_loss if mode == "shared" else again.loss) == pytest.approx(min(ranked), abs=1e-4)
    assert json.loads((tmp_path / "log.json").read_text())["dev_loss"] == log.dev_loss


def test_shared_runs_rank_checkpoints_by_the_main_stream_then_the_drafts():
    """A Shared checkpoint with a lower total loss but a worse main stream is not the best;
    equal main losses go to the better drafts; lossless ranks by the total loss."""
    from edgespec.speculative.train import DevScore

    fine_tune = DevScore(loss=5.0, main_loss=1.20, depth_acc=[0.2, 0.1])
    drafts = DevScore(loss=3.0, main_loss=1.50, depth_acc=[0.6, 0.5])
    tie = DevScore(loss=5.5, main_loss=1.20004, depth_acc=[0.3, 0.2])
    assert min([drafts, fine_tune], key=lambda d: d.rank("shared")) is fine_tune
    assert min([fine_tune, tie], key=lambda d: d.rank("shared")) is tie
    assert min([fine_tune, drafts], key=lambda d: d.rank("lossless")) is drafts
    assert DevScore(1.0, float("nan"), [0.9]).rank("shared") > fine_tune.rank("shared")  # not logged: never the best


def test_schedule_warms_up_then_decays_to_its_floor():
    from edgespec.speculative.train import lr_factor

    hp = TrainConfig(steps=110, warmup_steps=10, lr_floor=0.1)
    assert [lr_factor(s, hp) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert lr_factor(10, hp) == pytest.approx(1.0) and lr_factor(60, hp) == pytest.approx(0.55)
    assert lr_factor(109, hp) == pytest.approx(0.1 + 0.9 / 100) and lr_factor(110, hp) == pytest.approx(0.1)
    assert lr_factor(110, TrainConfig(steps=110, warmup_steps=10)) == 0.0  # no floor: to zero
    with pytest.raises(EdgespecError, match="lr_floor"):
        TrainConfig(lr_floor=1.5)


def test_the_streams_entry_trains_at_its_own_learning_rate(tiny_model):
    """entry_lr: P_j and the rank-eta map in a group of their own; the adapters keep lr."""
    from edgespec.speculative.train import param_groups

    params = StreamParams(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, f_rank=4, tree=(1, 1), mode="shared"))
    params.requires_grad_(True)
    one = param_groups(params, TrainConfig(lr=1e-3))
    assert len(one) == 1 and one[0]["lr"] == 1e-3 and len(one[0]["params"]) == len(list(params.parameters()))
    adapters, entry = param_groups(params, TrainConfig(lr=1e-3, entry_lr=5e-3))
    assert entry["lr"] == 5e-3 and {id(p) for p in entry["params"]} == {id(params.stream_emb), *(id(p) for p in params.f.parameters())}
    assert adapters["lr"] == 1e-3 and {id(p) for p in adapters["params"]} == {id(p) for p in params.lora.parameters()}


def test_depth_ramp_scales_the_streams_terms_only(tiny_model):
    """depth_scale 0 (the ramp's start) leaves the main stream's term; 1 the full loss."""
    spec = StreamsModel(tiny_model, StreamParams(tiny_model, DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, mode="shared", tree=(1, 1))))
    ex = _periodic_examples(n=3)
    batch = make_batch(ex, FeatureCache(spec, ex).h, [0, 1, 2], depth=2)
    loss_mod = DraftLoss(spec, TrainConfig(depth_weights=(0.5, 0.25), bf16=False))
    with torch.no_grad():
        total, main, per_depth, _ = loss_mod(*batch)
        start, main0, _, _ = loss_mod(*batch, depth_scale=0.0)
        half, _, _, _ = loss_mod(*batch, depth_scale=0.5)
    assert float(start) == pytest.approx(float(main0)) and float(main0) == pytest.approx(float(main))
    assert float(total) == pytest.approx(float(main + 0.5 * per_depth[0] + 0.25 * per_depth[1]), rel=1e-5)
    assert float(half) == pytest.approx(float(main + 0.25 * per_depth[0] + 0.125 * per_depth[1]), rel=1e-5)


def test_a_run_warm_starts_from_another_runs_weights(tiny_model, tmp_path):
    """train.init: every parameter of the same name and shape is copied (a plain fine-tune's
    adapters under a new stream entry), the rest stay fresh; another kind, or nothing that
    fits, is an error; the file's content enters the run's fingerprint."""
    from edgespec.speculative.drafters import save_drafter, warm_start_
    from edgespec.speculative.features import run_fingerprint

    plain_cfg = DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, tree=(1, 1), mode="shared")
    plain = StreamParams(tiny_model, plain_cfg)
    with torch.no_grad():
        for p in plain.parameters():
            p.normal_()
    save_drafter(tmp_path / "plain.pt", plain, plain_cfg)
    cfg = DrafterConfig(draft_depth=2, n_layers=1, lora_rank=4, f_rank=4, tree=(1, 1), mode="shared")
    params = StreamParams(tiny_model, cfg)
    copied, fresh = warm_start_(params, tmp_path / "plain.pt", cfg)
    assert fresh == ["f.0.weight", "f.1.weight"] and "lora.0.wq.B" in copied
    assert torch.equal(params.lora[0]["wq"].B, plain.lora[0]["wq"].B) and not params.f[1].weight.any()
    with pytest.raises(EdgespecError, match="holds a streams drafter, the recipe trains hydra"):
        warm_start_(params, tmp_path / "plain.pt", DrafterConfig(kind="hydra", draft_depth=2, tree=(1, 1)))
    with pytest.raises(EdgespecError, match="no parameter"):
        warm_start_(StreamParams(tiny_model, DrafterConfig(draft_depth=3, n_layers=1, lora_rank=8, tree=(1,))), tmp_path / "plain.pt", plain_cfg)
    spec, ex = StreamsModel(tiny_model, params), _periodic_examples()
    prints = {run_fingerprint(spec, ex, TrainConfig(init=str(tmp_path / "plain.pt")))}
    (tmp_path / "copy.pt").write_bytes((tmp_path / "plain.pt").read_bytes())
    prints.add(run_fingerprint(spec, ex, TrainConfig(init=str(tmp_path / "copy.pt"))))  # same content: same run
    assert len(prints) == 1 and run_fingerprint(spec, ex, TrainConfig()) not in prints


class _ByteTokenizer:
    """A tokenizer stand-in for the data loader's length rule: one id per byte, EOS 0."""

    chat_template = None
    eos_ids = (0,)

    def encode(self, text: str) -> list[int]:
        return list(text.encode())


def test_a_pair_that_does_not_fit_seq_len_whole_is_an_error_naming_it(tmp_path):
    """Prompt + response + end-of-turn must fit train.seq_len: a cut answer would teach the
    fine-tune not to stop. The error names the pairs and the seq_len that fits them all; a
    self-distilled row (a generation budget's end) is cut and marked instead."""
    from edgespec.speculative.train_data import load_examples

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps({"prompt": "p" * n, "response": "r" * 5}) for n in (4, 20, 9, 25)) + "\n")
    fits = load_examples(pairs, _ByteTokenizer(), 31, chat_template=False)
    assert [len(e.tokens) for e in fits] == [10, 26, 15, 31] and fits[3].tokens[-1] == 0 and not any(e.cut for e in fits)
    with pytest.raises(
        EdgespecError,
        match=r"2 prompt/response pair\(s\) do not fit train.seq_len=25 whole .*line 2 \(26 tokens\), line 4 \(31 tokens\); set train.seq_len to at least 31",
    ):
        load_examples(pairs, _ByteTokenizer(), 25, chat_template=False)
    distilled = tmp_path / "distilled.jsonl"
    distilled.write_text(json.dumps({"prompt_ids": [1] * 8, "response_ids": [2] * 10}) + "\n")
    (cut,) = load_examples(distilled, _ByteTokenizer(), 12, chat_template=False)
    assert cut.cut and cut.tokens == [1] * 8 + [2] * 4


def test_a_users_own_task_trains_in_shared_mode_with_its_own_dev_split(tiny_hf_dir, tmp_path):
    """README's path for a user's task: a JSONL of prompt/response pairs to train on and one
    kept out (train.dev_data), scored at each checkpoint; the run keeps its best main-stream
    checkpoint and says so."""
    from edgespec.config import load_recipe
    from edgespec.speculative.train import train_from_recipe

    def pairs(name: str, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        rows = [{"prompt": f"count to {int(k)}", "response": " ".join(str(i) for i in range(int(k)))} for k in torch.randint(3, 9, (n,), generator=g)]
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(tmp_path / name)

    overrides = [
        f"model.source={tiny_hf_dir}",
        "model.max_seq_len=128",
        "drafter.mode=shared",
        "drafter.n_layers=1",
        "drafter.draft_depth=2",
        "drafter.tree=[1,1]",
        f"train.data={pairs('train.jsonl', 24, 0)}",
        f"train.dev_data={pairs('dev.jsonl', 6, 1)}",
        f"train.out_dir={tmp_path / 'run'}",
        "train.seq_len=64",
        "train.steps=4",
        "train.batch_size=4",
        "train.checkpoint_every=2",
        "train.depth_weights=[0.1,0.1]",
        "train.bf16=false",
    ]
    summary = train_from_recipe(load_recipe(None, overrides))
    log = json.loads((tmp_path / "run" / "log.json").read_text())
    assert summary["dev"]["items"] == 6 and log["dev_steps"] == [2, 4] and len(log["dev_main_loss"]) == 2
    assert summary["dev"]["best_step"] == log["dev_steps"][log["dev_main_loss"].index(min(log["dev_main_loss"]))]
    assert summary["dev"]["best_main_loss"] == pytest.approx(min(log["dev_main_loss"]), abs=1e-4) and (tmp_path / "run" / "streams.pt").is_file()
    with pytest.raises(EdgespecError, match="train.dev_data"):
        load_recipe(None, ["train.dev_data=dev.txt"])
