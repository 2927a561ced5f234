"""Ports of Mamba's mixer (Mamba-1; its parameter names as transformers' MambaMixer has them, the
selective scan written out token by token as a user would), one correct and one for each mistake
of `derive.conformance.ssm.MAMBA_MISTAKES`, each differing from the correct one in the lines its
mistake names. Targets of `derive conform`: `derive conform tests/conform/corpus/mamba_ports.py:a_sign`."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Port(nn.Module):
    """Mamba's mixer; `step`, `decay`, `skip` and `gate` are what the ports change."""

    def __init__(self, d_model=12, inner=10, state_size=4, rank=3, conv=3):
        super().__init__()
        self.inner, self.state_size, self.rank = inner, state_size, rank
        self.in_proj = nn.Linear(d_model, 2 * inner, bias=False)
        self.conv1d = nn.Conv1d(inner, inner, conv, groups=inner, padding=conv - 1)
        self.x_proj = nn.Linear(inner, rank + 2 * state_size, bias=False)
        self.dt_proj = nn.Linear(rank, inner)
        self.A_log = nn.Parameter(torch.rand(inner, state_size) - 0.5)
        self.D = nn.Parameter(torch.randn(inner))
        self.out_proj = nn.Linear(inner, d_model, bias=False)

    def step(self, dt):
        return F.softplus(dt)

    def decay(self):
        return -torch.exp(self.A_log)

    def skip(self, x):
        return self.D * x

    def gate(self, y, z):
        return y * F.silu(z)

    def forward(self, hidden):
        n = hidden.shape[1]
        x, z = self.in_proj(hidden).chunk(2, dim=-1)
        x = F.silu(self.conv1d(x.transpose(1, 2))[..., :n].transpose(1, 2))
        delta, B, C = self.x_proj(x).split([self.rank, self.state_size, self.state_size], -1)
        dt = self.step(self.dt_proj(delta))  # (b, n, inner)
        A = self.decay()  # (inner, d_state)
        h = x.new_zeros(x.shape[0], self.inner, self.state_size)
        rows = []
        for t in range(n):
            h = (
                torch.exp(dt[:, t, :, None] * A) * h
                + (dt[:, t] * x[:, t])[..., None] * B[:, t, None]
            )
            rows.append((h @ C[:, t, :, None]).squeeze(-1) + self.skip(x[:, t]))
        return self.out_proj(self.gate(torch.stack(rows, dim=1), z))


class WithoutSoftplus(Port):
    def step(self, dt):
        return dt


class PositiveA(Port):
    def decay(self):
        return torch.exp(self.A_log)


class NoSkip(Port):
    def skip(self, x):
        return 0 * x


class NoGate(Port):
    def gate(self, y, z):
        return y


def _built(cls):
    def build():
        torch.manual_seed(0)
        return cls()

    return build


correct = _built(Port)
dt_without_softplus = _built(WithoutSoftplus)
a_sign = _built(PositiveA)
d_skip_missing = _built(NoSkip)
gate_missing = _built(NoGate)

CORRECT = {"correct": correct}
BROKEN = {
    "dt-without-softplus": dt_without_softplus,
    "a-sign": a_sign,
    "d-skip-missing": d_skip_missing,
    "gate-missing": gate_missing,
}
