"""the training core's mixed precision (bf16 autocast, float32 weights) and gradient checkpointing on a
Hugging Face model, and the device settings that refuse what cannot work."""
from __future__ import annotations

import pytest
import torch

from agentprm.errors import UserError
from agentprm.models.device import DeviceConfig, training_options, use_device
from agentprm.train.config import TrainConfig
from agentprm.train.core import train

torch.set_num_threads(1)


def tiny_lm():
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import build_model

    tok = build_tokenizer()
    return build_model("tiny", tok, seed=0), tok


def lm_run(device: DeviceConfig) -> tuple[dict, list, list]:
    """Three steps of next-token loss on fixed sequences; returns the weights, the losses and the logits' dtypes."""
    use_device(device)
    model, tok = tiny_lm()
    seqs = [tok.encode(f"go to shelf {i} and take the apple {i}") for i in range(8)]
    dtypes = []

    def loss_fn(m, batch):
        ids = torch.tensor(batch)
        out = m(input_ids=ids, labels=ids)
        dtypes.append(out.logits.dtype)
        return out.loss, {}

    history = train(model, [s[:8] for s in seqs], loss_fn, TrainConfig(lr=1e-2, steps=3, batch_size=4, log_every=1),
                    description="lm", progress=False)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, [h["loss"] for h in history], dtypes


def test_gradient_checkpointing_trains_to_the_same_weights():
    plain, plain_losses, _ = lm_run(DeviceConfig(device="cpu"))
    checked, losses, _ = lm_run(DeviceConfig(device="cpu", gradient_checkpointing=True))
    assert losses == pytest.approx(plain_losses, rel=1e-5)
    for name, tensor in plain.items():
        assert torch.allclose(checked[name], tensor, atol=1e-6), name


def test_bf16_mixed_precision_computes_in_bf16_and_keeps_float32_weights():
    plain, plain_losses, dtypes = lm_run(DeviceConfig(device="cpu"))
    assert set(dtypes) == {torch.float32}
    mixed, losses, dtypes = lm_run(DeviceConfig(device="cpu", mixed_precision="bf16"))
    assert set(dtypes) == {torch.bfloat16}                       # the forward ran under autocast
    assert all(t.dtype == torch.float32 for t in mixed.values())  # the weights did not
    assert losses == pytest.approx(plain_losses, rel=3e-2)        # bf16 rounding, not another training
    assert any(not torch.equal(mixed[n], plain[n]) for n in plain)


def test_device_settings_refuse_what_cannot_work():
    with pytest.raises(UserError, match="'mixed_precision' must be no or bf16"):
        use_device(DeviceConfig(device="cpu", mixed_precision="fp8"))
    with pytest.raises(UserError, match="keeps the weights in float32; with dtype bfloat16"):
        use_device(DeviceConfig(device="cpu", dtype="bfloat16", mixed_precision="bf16"))
    assert use_device(DeviceConfig(device="cpu", mixed_precision="bf16"))[1] == torch.float32
    assert training_options() == ("bf16", False)


def test_checkpointing_a_model_without_a_hugging_face_backbone_is_one_line():
    use_device(DeviceConfig(device="cpu", gradient_checkpointing=True))
    with pytest.raises(UserError, match="no Hugging Face backbone"):
        train(torch.nn.Linear(2, 1), [[1.0, 2.0]] * 4, lambda m, b: ((m(torch.tensor(b)) ** 2).mean(), {}),
              TrainConfig(steps=1, batch_size=2), progress=False)


def test_train_prm_runs_with_both_flags(tmp_path, capsys):
    from agentprm.cli import main
    from agentprm.data.tables import write_with_info
    from agentprm.data.trajectories import write_episodes_file
    from agentprm.targets.mc import targets_from_rollouts
    from test_prm import episodes_for

    rollouts = write_episodes_file(tmp_path / "r.parquet", [e for t in range(4) for e in episodes_for(f"t{t}")])
    t = targets_from_rollouts(rollouts, gamma=1.0)
    write_with_info(tmp_path / "q.parquet", t.table, t.info)
    assert main(["train-prm", "--targets", str(tmp_path / "q.parquet"), "--init", "tiny", "--out",
                 str(tmp_path / "prm"), "--mixed-precision", "bf16", "--gradient-checkpointing", "--json",
                 str(tmp_path / "m.json")]) == 0
    assert (tmp_path / "prm" / "model.safetensors").is_file()
