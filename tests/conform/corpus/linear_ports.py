"""Ports of Gated DeltaNet (the book's ch04/08 class, restated with the book's parameter names),
one correct and one for each mistake of `derive.conformance.linear.MISTAKES`, each differing
from the correct one in the lines its mistake names. Targets of `derive conform`:
`derive conform tests/conform/corpus/linear_ports.py:inclusive_decay`."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Port(nn.Module):
    """The book's parameters (β per value channel), its forward; `read` and `write` are what the
    ports change."""

    normalise = True
    query_power = 0.5  # q / c_h^{power}

    def __init__(self, d_in=12, d_out=18, num_heads=3):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.W_gate = nn.Linear(d_in, d_out, bias=False)
        self.W_beta = nn.Linear(d_in, d_out, bias=False)
        self.W_alpha = nn.Linear(d_in, num_heads, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(num_heads))
        self.A_log = nn.Parameter(torch.full((num_heads,), 0.5))  # a decay that matters
        self.norm = nn.RMSNorm(self.head_dim, eps=1e-6)
        self.out_proj = nn.Linear(d_out, d_out)

    def split(self, t):
        return t.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)

    def write(self, state, k, v, beta, alpha):
        """The state after token t: decayed, then the delta rule's write."""
        state = alpha * state
        taken = (k.unsqueeze(-2) @ state).squeeze(-2)
        return state + k.unsqueeze(-1) * (beta * (v - taken)).unsqueeze(-2)

    def forward(self, x):
        q, k, v = (self.split(w(x)) for w in (self.W_query, self.W_key, self.W_value))
        if self.normalise:  # the book's: x / √(‖x‖² + 10⁻⁶)
            q, k = (t * torch.rsqrt((t * t).sum(-1, keepdim=True) + 1e-6) for t in (q, k))
        q = q / self.head_dim**self.query_power
        beta = self.split(torch.sigmoid(self.W_beta(x)))
        log_decay = -self.A_log.exp() * F.softplus(self.W_alpha(x) + self.dt_bias)
        state = x.new_zeros(x.shape[0], self.num_heads, self.head_dim, self.head_dim)
        rows = []
        for t in range(x.shape[1]):
            alpha = log_decay[:, t, :, None, None].exp()
            state = self.write(state, k[:, :, t], v[:, :, t], beta[:, :, t], alpha)
            rows.append((q[:, :, t].unsqueeze(-2) @ state).squeeze(-2))
        context = self.norm(torch.stack(rows, dim=2).transpose(1, 2))
        context = context * F.silu(self.split(self.W_gate(x)).transpose(1, 2))
        return self.out_proj(context.flatten(-2))


class InclusiveDecay(Port):
    def write(self, state, k, v, beta, alpha):  # the token's own write decayed too
        taken = (k.unsqueeze(-2) @ (alpha * state)).squeeze(-2)
        return alpha * (state + k.unsqueeze(-1) * (beta * (v - taken)).unsqueeze(-2))


class BetaOnKeys(Port):
    def write(self, state, k, v, beta, alpha):  # β on what is taken out only
        state = alpha * state
        taken = (k.unsqueeze(-2) @ state).squeeze(-2)
        return state + k.unsqueeze(-1) * (v - beta * taken).unsqueeze(-2)


class NoNorm(Port):
    normalise = False


class ScaleTwice(Port):
    query_power = 1.0


class Parallel(Port):
    """Qwen 3.5's β (one per head) and the parallel form: the delta rule's triangular system
    (I + L) U = diag(β) V solved for the whole sequence, then C = (Q Kᵀ ∘ Γ ∘ M) U."""

    def __init__(self, d_in=12, d_out=18, num_heads=3):
        super().__init__(d_in, d_out, num_heads)
        self.W_beta = nn.Linear(d_in, num_heads, bias=False)

    def solve(self, system, right):
        return torch.linalg.solve_triangular(system, right, upper=False)

    def forward(self, x):
        q, k, v = (self.split(w(x)) for w in (self.W_query, self.W_key, self.W_value))
        q, k = (t * torch.rsqrt((t * t).sum(-1, keepdim=True) + 1e-6) for t in (q, k))
        q = q / self.head_dim**0.5
        beta = torch.sigmoid(self.W_beta(x)).transpose(1, 2)[..., None]  # (b, h, n, 1)
        log_decay = -self.A_log.exp() * F.softplus(self.W_alpha(x) + self.dt_bias)
        G = log_decay.transpose(1, 2).cumsum(-1)  # (b, h, n)
        n = x.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        gamma = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, -torch.inf).exp()
        system = torch.eye(n) + (beta * (k @ k.transpose(-2, -1)) * gamma).tril(-1)
        u = self.solve(system, beta * v)
        context = self.norm((((q @ k.transpose(-2, -1)) * gamma) @ u).transpose(1, 2))
        context = context * F.silu(self.split(self.W_gate(x)).transpose(1, 2))
        return self.out_proj(context.flatten(-2))


class TransposedSolve(Parallel):
    def solve(self, system, right):  # the upper solve with (I + L)ᵀ
        return torch.linalg.solve_triangular(system.transpose(-2, -1), right, upper=True)


def _built(cls):
    def build():
        torch.manual_seed(0)
        return cls()

    return build


correct = _built(Port)
parallel = _built(Parallel)
transposed_solve = _built(TransposedSolve)
inclusive_decay = _built(InclusiveDecay)
beta_on_keys = _built(BetaOnKeys)
l2_norm_forgotten = _built(NoNorm)
scale_twice = _built(ScaleTwice)

#: The correct ports: token by token (β per channel, the book's), the parallel form (β per head).
CORRECT = {"correct": correct, "parallel": parallel}
#: Each broken port by the id `derive conform` must name.
BROKEN = {
    "transposed-solve": transposed_solve,
    "inclusive-decay": inclusive_decay,
    "beta-on-keys": beta_on_keys,
    "l2-norm-forgotten": l2_norm_forgotten,
    "scale-twice": scale_twice,
}
