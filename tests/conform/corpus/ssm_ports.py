"""Ports of Mamba-2's mixer (its parameter names as transformers' Mamba2Mixer has them, the layer
written out as a user would: the recurrence token by token, or the quadratic form with the
semiseparable mask), one correct of each kind and one for each mistake of
`derive.conformance.ssm.MISTAKES`, each differing from the correct one in the lines its mistake
names. Targets of `derive conform`: `derive conform tests/conform/corpus/ssm_ports.py:a_sign`."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Port(nn.Module):
    """Mamba-2's mixer; `step`, `decay`, `scan`, `heads` and `gated_norm` are what the ports
    change."""

    def __init__(self, d_model=12, num_heads=4, head_dim=3, state_size=5, n_groups=2, conv=3):
        super().__init__()
        self.num_heads, self.head_dim, self.state_size = num_heads, head_dim, state_size
        self.n_groups, self.inner = n_groups, num_heads * head_dim
        self.channels = self.inner + 2 * n_groups * state_size
        self.in_proj = nn.Linear(d_model, self.inner + self.channels + num_heads, bias=False)
        self.conv1d = nn.Conv1d(
            self.channels, self.channels, conv, groups=self.channels, padding=conv - 1
        )
        self.dt_bias = nn.Parameter(torch.rand(num_heads) - 0.5)
        self.A_log = nn.Parameter(torch.rand(num_heads) - 0.5)
        self.D = nn.Parameter(torch.randn(num_heads))
        self.norm = nn.Module()
        self.norm.weight = nn.Parameter(1 + 0.1 * torch.randn(self.inner))
        self.norm.variance_epsilon = 1e-5
        self.out_proj = nn.Linear(self.inner, d_model, bias=False)

    def step(self, dt):
        return F.softplus(dt + self.dt_bias)

    def decay(self):
        return -torch.exp(self.A_log)

    def heads(self, t):
        """(b, n, g, d_state) -> (b, n, h, d_state): each group shared by h/g consecutive heads."""
        return t.repeat_interleave(self.num_heads // self.n_groups, dim=2)

    def gated_norm(self, y, z):
        gated = y * F.silu(z)
        parts = gated.unflatten(-1, (self.n_groups, -1))
        eps = self.norm.variance_epsilon
        return self.norm.weight * (parts * torch.rsqrt(parts.pow(2).mean(-1, True) + eps)).flatten(
            -2
        )

    def scan(self, x, dt, A, B, C):
        """h_t = e^{Δ_t A} h_{t−1} + Δ_t x_t B_tᵀ, y_t = h_t C_t + D x_t, token by token."""
        b, n, h, p = x.shape
        state = x.new_zeros(b, h, p, self.state_size)
        rows = []
        for t in range(n):
            a = torch.exp(dt[:, t] * A)[..., None, None]
            state = a * state + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
            y = (state @ C[:, t, :, :, None]).squeeze(-1)
            rows.append(y + self.D[:, None] * x[:, t])
        return torch.stack(rows, dim=1)

    def forward(self, hidden):
        z, xbc, dt = self.in_proj(hidden).split([self.inner, self.channels, self.num_heads], -1)
        n = hidden.shape[1]
        xbc = F.silu(self.conv1d(xbc.transpose(1, 2))[..., :n].transpose(1, 2))
        grouped = self.n_groups * self.state_size
        x, B, C = xbc.split([self.inner, grouped, grouped], dim=-1)
        x = x.unflatten(-1, (self.num_heads, self.head_dim))
        B, C = (self.heads(t.unflatten(-1, (self.n_groups, self.state_size))) for t in (B, C))
        y = self.scan(x, self.step(dt), self.decay(), B, C)
        return self.out_proj(self.gated_norm(y.flatten(-2), z))


class Quadratic(Port):
    """The quadratic form: Y = (L ∘ C Bᵀ) diag(Δ) X + D X, L_{t,i} = e^{A (cumΔ_t − cumΔ_i)}."""

    def scan(self, x, dt, A, B, C):
        n = x.shape[1]
        cum = (dt * A).cumsum(1).transpose(1, 2)  # (b, h, n)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        mask = (cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, -torch.inf).exp()
        scores = torch.einsum("bthn,bihn->bhti", C, B) * mask
        y = torch.einsum("bhti,bihp->bthp", scores, dt[..., None] * x)
        return y + self.D[:, None] * x


class WithoutSoftplus(Port):
    def step(self, dt):
        return dt + self.dt_bias


class PositiveA(Port):
    def decay(self):
        return torch.exp(self.A_log)


class InclusiveMask(Quadratic):
    def scan(self, x, dt, A, B, C):  # L_{t,i} with a_i in it: cumulative sums from i − 1
        shifted = torch.cat([torch.zeros_like(dt[:, :1]), dt[:, :-1]], dim=1)
        n = x.shape[1]
        cum = (dt * A).cumsum(1).transpose(1, 2)
        before = (shifted * A).cumsum(1).transpose(1, 2)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        mask = (cum[..., :, None] - before[..., None, :]).masked_fill(~causal, -torch.inf).exp()
        scores = torch.einsum("bthn,bihn->bhti", C, B) * mask
        return torch.einsum("bhti,bihp->bthp", scores, dt[..., None] * x) + self.D[:, None] * x


class Swapped(Port):
    def scan(self, x, dt, A, B, C):
        return super().scan(x, dt, A, C, B)


class NoSkip(Port):
    def scan(self, x, dt, A, B, C):
        return super().scan(x, dt, A, B, C) - self.D[:, None] * x


class TiledGroups(Port):
    def heads(self, t):  # head i reads group i mod g
        return t.repeat(1, 1, self.num_heads // self.n_groups, 1)


class NormBeforeGate(Port):
    def gated_norm(self, y, z):
        parts = y.unflatten(-1, (self.n_groups, -1))
        eps = self.norm.variance_epsilon
        normed = (parts * torch.rsqrt(parts.pow(2).mean(-1, True) + eps)).flatten(-2)
        return self.norm.weight * normed * F.silu(z)


def _built(cls):
    def build():
        torch.manual_seed(0)
        return cls()

    return build


correct = _built(Port)
quadratic = _built(Quadratic)
dt_without_softplus = _built(WithoutSoftplus)
a_sign = _built(PositiveA)
mask_off_by_one = _built(InclusiveMask)
b_c_swapped = _built(Swapped)
d_skip_missing = _built(NoSkip)
groups_tiled = _built(TiledGroups)
norm_before_gate = _built(NormBeforeGate)

#: The correct ports: the recurrence, and the quadratic form with the semiseparable mask.
CORRECT = {"correct": correct, "quadratic": quadratic}
#: Each broken port by the id `derive conform` must name.
BROKEN = {
    "dt-without-softplus": dt_without_softplus,
    "a-sign": a_sign,
    "mask-off-by-one": mask_off_by_one,
    "b-c-swapped": b_c_swapped,
    "d-skip-missing": d_skip_missing,
    "groups-tiled": groups_tiled,
    "norm-before-gate": norm_before_gate,
}
