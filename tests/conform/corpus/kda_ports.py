"""Ports of Kimi Delta Attention (Kimi Linear's layer, its parameter names as transformers'
KimiLinearDeltaAttention has them, the layer written out as a user would, token by token), one
correct and one for each mistake of `derive.conformance.kda.MISTAKES`, each differing from the
correct one in the lines its mistake names. Targets of `derive conform`:
`derive conform tests/conform/corpus/kda_ports.py:decay_on_values`."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ForgetGate(nn.Module):
    def __init__(self, d_model, num_heads, head_dim):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        self.f_a_proj = nn.Linear(d_model, head_dim, bias=False)
        self.f_b_proj = nn.Linear(head_dim, num_heads * head_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.rand(num_heads * head_dim) - 0.5)
        self.A_log = nn.Parameter(torch.rand(1, 1, num_heads, 1) - 1.0)

    def forward(self, x):
        raw = (self.f_b_proj(self.f_a_proj(x)) + self.dt_bias).unflatten(-1, (self.num_heads, -1))
        return -self.A_log.exp() * F.softplus(raw)  # (b, n, h, c_h)


class Port(nn.Module):
    """KDA; `decay`, `write`, `normalise` and `gate` are what the ports change."""

    normalise = True

    def __init__(self, d_model=12, num_heads=3, head_dim=4, conv=3):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        inner = num_heads * head_dim
        self.q_proj = nn.Linear(d_model, inner, bias=False)
        self.k_proj = nn.Linear(d_model, inner, bias=False)
        self.v_proj = nn.Linear(d_model, inner, bias=False)
        self.conv1d = nn.Conv1d(
            3 * inner, 3 * inner, conv, groups=3 * inner, padding=conv - 1, bias=False
        )
        self.forget_gate = ForgetGate(d_model, num_heads, head_dim)
        self.b_proj = nn.Linear(d_model, num_heads, bias=False)
        self.g_a_proj = nn.Linear(d_model, head_dim, bias=False)
        self.g_b_proj = nn.Linear(head_dim, inner, bias=False)
        self.o_norm = nn.Module()
        self.o_norm.weight = nn.Parameter(1 + 0.1 * torch.randn(head_dim))
        self.o_norm.variance_epsilon = 1e-6
        self.o_proj = nn.Linear(inner, d_model, bias=False)

    def decay(self, state, alpha):
        """diag(α_t) S: each row, a key channel, by its own α."""
        return alpha[..., :, None] * state

    def write(self, state, k, v, beta, alpha):
        state = self.decay(state, alpha)
        taken = (k.unsqueeze(-2) @ state).squeeze(-2)
        return state + k.unsqueeze(-1) * (beta[..., None] * (v - taken)).unsqueeze(-2)

    def gate(self, z):
        return torch.sigmoid(z)

    def forward(self, x):
        n = x.shape[1]
        mixed = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
        mixed = F.silu(self.conv1d(mixed.transpose(1, 2))[..., :n].transpose(1, 2))
        q, k, v = (
            t.unflatten(-1, (self.num_heads, -1)).transpose(1, 2) for t in mixed.chunk(3, -1)
        )
        if self.normalise:
            q, k = (t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6) for t in (q, k))
        q = q / self.head_dim**0.5
        g = self.forget_gate(x).transpose(1, 2)  # (b, h, n, c_h)
        beta = torch.sigmoid(self.b_proj(x)).transpose(1, 2)  # (b, h, n)
        state = x.new_zeros(x.shape[0], self.num_heads, self.head_dim, self.head_dim)
        rows = []
        for t in range(n):
            state = self.write(state, k[:, :, t], v[:, :, t], beta[:, :, t], g[:, :, t].exp())
            rows.append((q[:, :, t].unsqueeze(-2) @ state).squeeze(-2))
        o = torch.stack(rows, dim=2).transpose(1, 2)  # (b, n, h, c_h)
        normed = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.o_norm.variance_epsilon)
        z = self.g_b_proj(self.g_a_proj(x)).unflatten(-1, (self.num_heads, -1))
        return self.o_proj((self.o_norm.weight * normed * self.gate(z)).flatten(-2))


class DecayOnValues(Port):
    def decay(self, state, alpha):  # the value channels decayed: S diag(α)
        return state * alpha[..., None, :]


class InclusiveDecay(Port):
    def write(self, state, k, v, beta, alpha):  # the token's own write decayed too
        state = self.decay(state, alpha)
        taken = (k.unsqueeze(-2) @ state).squeeze(-2)
        written = k.unsqueeze(-1) * (beta[..., None] * (v - taken)).unsqueeze(-2)
        return state + self.decay(written, alpha)


class BetaOnKeys(Port):
    def write(self, state, k, v, beta, alpha):  # β on what is taken out only
        state = self.decay(state, alpha)
        taken = (k.unsqueeze(-2) @ state).squeeze(-2)
        return state + k.unsqueeze(-1) * (v - beta[..., None] * taken).unsqueeze(-2)


class NoNorm(Port):
    normalise = False


class SiluGate(Port):
    def gate(self, z):
        return F.silu(z)


def _built(cls):
    def build():
        torch.manual_seed(0)
        return cls()

    return build


correct = _built(Port)
decay_on_values = _built(DecayOnValues)
inclusive_decay = _built(InclusiveDecay)
beta_on_keys = _built(BetaOnKeys)
l2_norm_forgotten = _built(NoNorm)
gate_silu = _built(SiluGate)

#: The correct port.
CORRECT = {"correct": correct}
#: Each broken port by the id `derive conform` must name.
BROKEN = {
    "decay-on-values": decay_on_values,
    "inclusive-decay": inclusive_decay,
    "beta-on-keys": beta_on_keys,
    "l2-norm-forgotten": l2_norm_forgotten,
    "gate-silu": gate_silu,
}
