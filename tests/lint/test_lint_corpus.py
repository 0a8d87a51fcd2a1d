"""Precision: healthy training scripts in many styles stay clean. Recall: breaking one line of
a healthy script in the way the seeds describe makes the matching rule fire."""

from __future__ import annotations

from pathlib import Path

import pytest

from traindoc.lint import lint_paths, lint_source

CORPUS = Path(__file__).parents[1] / "lint_corpus"
ZOO = Path(__file__).parents[2] / "zoo"
DEMO = Path(__file__).parents[2] / "src" / "traindoc" / "demo_scripts"


def test_corpus_is_large_enough():
    files = sorted(CORPUS.glob("*.py"))
    assert len(files) >= 17
    assert sum(len(f.read_text().splitlines()) for f in files) >= 1500


def test_corpus_holds_no_copied_public_files():
    """Only scripts written here: none carries a header naming an upstream source."""
    for f in sorted(CORPUS.glob("*.py")):
        assert not f.read_text().startswith("# From "), f.name


def test_healthy_corpus_is_clean():
    result = lint_paths([CORPUS], use_config=False)
    assert not result.errors
    assert [(f.path, f.line, f.finding.id) for f in result.findings] == []


def test_healthy_zoo_scripts_are_clean():
    healthy = sorted([*ZOO.glob("healthy_*.py"), *DEMO.glob("healthy_*.py")])
    if not healthy:
        pytest.skip("no healthy zoo scripts yet")
    result = lint_paths(healthy, use_config=False)
    assert not result.errors
    # A twin that runs its failing script with the fix on (a flag lint cannot read) is linked to
    # that script: a finding there is the failing script's, not the twin's.
    own = {p.resolve() for p in healthy}
    assert [(f.path, f.line, f.finding.id) for f in result.findings if Path(f.path).resolve() in own] == []


# (file, text to replace, replacement, the id that must then fire)
MUTATIONS = [
    ("cifar_amp_resnet.py", "            scaler.unscale_(optimizer)\n", "", "clip-before-unscale"),
    ("cifar_amp_resnet.py", '            "scaler": scaler.state_dict(),\n', "", "checkpoint-incomplete"),
    ("bert_finetune_manual.py",
     "            if cfg.gradient_accumulation_steps > 1:\n                loss = loss / cfg.gradient_accumulation_steps\n",
     "", "unscaled-grad-accumulation"),
    ("accelerate_glue.py", "                loss = outputs.loss\n",
     "                loss = outputs.loss / args.gradient_accumulation_steps\n", "unscaled-grad-accumulation"),
    ("cifar_amp_resnet.py", "    model.eval()\n", "", "eval-in-train-mode"),
    ("ddp_torchrun.py", "        optimizer.zero_grad(set_to_none=True)\n", "", "missing-zero-grad"),
    ("ddp_torchrun.py", "        optimizer.zero_grad(set_to_none=True)\n        loss.backward()\n        optimizer.step()\n",
     "        loss.backward()\n        optimizer.zero_grad(set_to_none=True)\n        optimizer.step()\n",
     "grad-cleared-before-step"),
    ("distill_kd.py", "        with torch.no_grad():\n            t_logits",
     "        with torch.inference_mode():\n            t_logits", "inference-tensor-in-autograd"),
    ("ddp_torchrun.py", "            with torch.no_grad():\n                dist.all_reduce(loss, op=dist.ReduceOp.AVG)\n",
     "            dist.all_reduce(loss, op=dist.ReduceOp.AVG)\n", "autograd-collective"),
    ("ddp_torchrun.py", '            torch.save(state, path + ".partial")\n            os.replace(path + ".partial", path)\n',
     "            torch.save(state, path)\n", "checkpoint-not-atomic"),
    ("muon_speedrun.py", "muon_lr = 0.02", "muon_lr = 3e-4", "muon-adamw-scale-lr"),
    ("bert_finetune_manual.py", "                loss = loss / cfg.gradient_accumulation_steps\n",
     "                loss = torch.nan_to_num(loss) / cfg.gradient_accumulation_steps\n", "masked-nonfinite"),
    ("ddp_torchrun.py", "            loss = criterion(output, target)\n",
     "            loss = criterion(output, target)\n            if loss > cfg.max_loss:\n"
     "                loss = torch.tensor(cfg.max_loss, device=loss.device)\n", "constant-loss"),
    ("swa_cifar.py", "update_bn(train_loader, swa_model, device=device)\n", "\n", "stale-bn-eval"),
    ("distill_kd.py", "                student.train()\n", "", "trained-in-eval-mode"),
    ("charlm_microsteps.py",
     ("    for it in range(args.iters):\n", "        model.train()\n        for _ in range(args.micro):\n"),
     ("    model.train()\n    for it in range(args.iters):\n", "        for _ in range(args.micro):\n"),
     "trained-in-eval-mode"),

    ("simclr.py", "    model = SimCLR().cuda()\n", "    model = SimCLR().cuda().half()\n", "bf16-master-weights"),
    ("swa_cifar.py", "    for x, y in train_loader:\n", "    scheduler.step()\n    for x, y in train_loader:\n",
     "scheduler-before-optimizer"),
    ("distill_kd.py", '            t_logits = teacher(ids).logits.float()\n        with torch.autocast("cuda", dtype=torch.bfloat16):\n            s_logits = student(ids).logits\n',
     '            t_logits = teacher(ids).logits.float()\n        with torch.autocast("cuda", dtype=torch.bfloat16):\n            s_logits = student(ids).logits.detach()\n',
     "no-gradient"),
    ("distill_kd.py",
     ("    for p in teacher.parameters():\n        p.requires_grad_(False)\n",
      "        with torch.no_grad():\n            t_logits = teacher(ids).logits.float()\n"),
     ("", "        t_logits = teacher(ids).logits.float()\n"), "target-not-detached"),
    ("ddp_torchrun.py", "    loader.sampler.set_epoch(epoch)\n", "", "repeated-batch"),
    ("bert_finetune_manual.py", "        model.train()\n        tr_loss = 0.0\n",
     "        model.train()\n        set_seed(cfg.seed)\n        tr_loss = 0.0\n", "repeated-batch"),
]


@pytest.mark.parametrize("name, old, new, expected", MUTATIONS, ids=[f"{m[0]}:{m[3]}" for m in MUTATIONS])
def test_breaking_a_healthy_script_fires_the_rule(name, old, new, expected):
    source = (CORPUS / name).read_text()
    # one line broken, or several lines of one mistake (a teacher neither frozen nor under no_grad)
    for before, after in zip(old, new) if isinstance(old, tuple) else [(old, new)]:
        assert source.count(before) == 1, "the mutation must match the corpus file exactly once"
        source = source.replace(before, after)
    findings, errors = lint_source(source, name)
    assert not errors
    assert {f.finding.id for f in findings} == {expected}
