"""Whole training scripts from other projects, round 3, run by a new user (fresh eyes, h82).

Each ``prog_*`` is a training step written the way a public project writes it (the style is
named in its docstring), at toy size. It takes ``wrap`` (identity eagerly; ``to_graph`` on
the model for ``@program("model")`` programs in the converted run) and returns
``(step, objs, calls)``. ``calls`` are the step's argument tuples, or callables
``call(step)`` for what the driving loop does between steps (a checkpoint saved and
loaded, layers frozen). Every program is built twice from one seed; one copy runs eagerly,
the other converted (``to_graph(step)`` or ``to_graph(model)`` in the eager step), and after
*every* call we compare the returned value, what was printed, every parameter, gradient and
buffer of the modules in ``objs``, optimizer and scheduler ``state_dict()``, Python lists,
dicts and counters in ``objs``, ``torch.Generator`` states in ``objs`` and the global RNG
state (rel 1e-5, float32). A call that raises must raise the same exception type in both.

Verdicts: ``convert`` (no FallbackWarning, traced at most twice unless ``MAX_TRACES`` says
otherwise), ``fallback`` (a FallbackWarning naming this file's line, eager's results;
strict raises ConversionError), ``fallback_once`` (the same on the first call only), or a
strict xfail whose reason starts ``BUG:`` / ``needless fallback:`` with a minimal
reproduction (a needless-fallback xfail still checks eager's results after every call).
"""
from __future__ import annotations

import collections
import contextlib
import copy
import io
import math
import os
import random
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from tests.training.test_fresh_eyes_techniques import _gen, _same, mlp
from tests.training.test_fresh_eyes_techniques import _xy as _techniques_xy
from transpiler import ConversionError, FallbackWarning, to_graph

pytestmark = pytest.mark.usefixtures("one_thread")
THIS_FILE = os.path.basename(__file__)
_PROGRAMS = {}


def program(how="step"):
    def deco(fn):
        _PROGRAMS[fn.__name__] = (fn, how)
        return fn
    return deco


def _xy(n=6, **kw):
    return _techniques_xy(n=n, **kw)


def _imgs(n=6, b=4, c=1, hw=8, k=3, seed=7):
    g = _gen(seed)
    return [(torch.randn(b, c, hw, hw, generator=g), torch.randint(0, k, (b,), generator=g))
            for _ in range(n)]


def _plain_step(net, optimizer):
    """The usual four lines of a step: zero_grad, cross_entropy, backward, step."""
    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step


# ----------------------------------------------------------------------------- runner
def _snap(x, depth=0):
    if depth > 6:
        return repr(type(x))
    if isinstance(x, torch.Tensor):
        return ("T", x.detach().clone(), x.requires_grad,
                None if not x.is_leaf or x.grad is None else x.grad.detach().clone())
    if isinstance(x, torch.Generator):
        return ("G", x.get_state())
    if isinstance(x, nn.Module):
        out = {}
        for n, p in x.named_parameters(remove_duplicate=False):
            out["p:" + n] = _snap(p, depth + 1)
        for n, b in x.named_buffers(remove_duplicate=False):
            out["b:" + n] = _snap(b, depth + 1)
        out["training"] = [m.training for m in x.modules()]
        out["requires_grad"] = [p.requires_grad for p in x.parameters()]
        return out
    if isinstance(x, torch.optim.Optimizer):
        sd = x.state_dict()
        return {"state": _snap(sd["state"], depth + 1),
                "groups": [{k: v for k, v in g.items() if k != "params"}
                           for g in sd["param_groups"]]}
    if isinstance(x, (torch.optim.lr_scheduler.LRScheduler,
                      torch.optim.lr_scheduler.ReduceLROnPlateau)):
        return {k: _snap(v, depth + 1) for k, v in x.state_dict().items()
                if not callable(v) and k not in ("_get_lr_called_within_step",
                                                 "lr_lambdas", "_scale_fn_ref")}
    if isinstance(x, dict):
        return {k: _snap(v, depth + 1) for k, v in x.items()}
    if isinstance(x, collections.deque):
        return [_snap(v, depth + 1) for v in x]
    if isinstance(x, (list, tuple)):
        return type(x)(_snap(v, depth + 1) for v in x)
    if isinstance(x, (int, float, bool, str, type(None))):
        return x
    if hasattr(x, "__dict__"):
        return {k: _snap(v, depth + 1) for k, v in vars(x).items() if not callable(v)}
    return repr(x)


def _run(name, mode):
    """mode: 'eager', 'default' or 'strict'. One row per call, taken right after it."""
    fn, how = _PROGRAMS[name]
    strict = mode == "strict"
    torch.set_grad_enabled(True)     # a failed program must not leave grad mode off
    torch.manual_seed(0)
    random.seed(0)
    wrap = (lambda m: m) if mode == "eager" or how != "model" else \
        (lambda m: to_graph(m, strict=strict))
    step, objs, calls = fn(wrap)
    if mode != "eager" and how == "step":
        step = to_graph(step, strict=strict)
    torch.manual_seed(1)
    random.seed(1)
    rows, fbs = [], []
    for i, c in enumerate(calls):
        buf = io.StringIO()
        with warnings.catch_warnings(record=True) as rec, contextlib.redirect_stdout(buf):
            warnings.simplefilter("always")
            try:
                out = c(step) if callable(c) else step(*c)
            except ConversionError:
                raise
            except Exception as e:          # noqa: BLE001 -- eager's exception is compared
                out = ("raised", type(e).__name__)
        fbs += [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
        rows.append((i, _snap(out), _snap(objs), buf.getvalue(), torch.get_rng_state(),
                     random.getstate()))
    info = getattr(step, "cache_info", None)
    return rows, fbs, (info().traces if info is not None else None)


class NeedlessFallback(AssertionError):
    """Raised when a program fell back cleanly (eager's results, this file's line) where it
    should convert: a ``needless fallback:`` xfail expects exactly this."""


def check(name, expect):
    """Eager vs converted, after every call; ``expect`` is 'convert' or 'fallback'."""
    exp, _, _ = _run(name, "eager")
    got, fbs, traces = _run(name, "default")
    for msg in fbs:
        assert re.search(re.escape(THIS_FILE) + r":\d+", msg), \
            f"fallback names no line of the user's file: {msg}"
    for (i, e_out, e_state, e_print, e_rng, e_py), (_, g_out, g_state, g_print, g_rng, g_py) \
            in zip(exp, got):
        _same(e_out, g_out, f"call {i} returned")
        _same(e_state, g_state, f"call {i} state")
        assert g_print == e_print, f"call {i} printed {g_print!r} != eager's {e_print!r}"
        assert torch.equal(e_rng, g_rng), f"call {i}: global RNG state differs from eager's"
        assert e_py == g_py, f"call {i}: Python RNG state differs from eager's"
    if expect == "convert":
        if fbs:
            raise NeedlessFallback(f"fell back: {fbs[0]}")
        if traces is not None:      # a converted step: traced, and not once per call
            assert 1 <= traces <= MAX_TRACES.get(name, 2), f"{traces} traces"
    else:
        assert fbs, "expected a FallbackWarning"
        if expect == "fallback_once":     # the first call's state refused; later calls convert
            assert len(fbs) == 1, fbs
        with pytest.raises(ConversionError):
            _run(name, "strict")
    return fbs


# ================================================================ pytorch/examples
class MnistNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 6, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(6 * 2 * 2, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def _mnist(wrap):
    net = MnistNet()
    model = wrap(net)
    optimizer = torch.optim.Adadelta(net.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.7)
    it = {"batch_idx": 0}
    log_interval = 2

    def train_step(data, target):
        model.train()
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if it["batch_idx"] % log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                1, it["batch_idx"] * len(data), 24, 100. * it["batch_idx"] / 6, loss.item()))
        it["batch_idx"] += 1
        scheduler.step()
        return loss.item()
    return train_step, [net, optimizer, scheduler, it], _imgs()


@program()
def prog_mnist_adadelta_steplr(wrap):
    """pytorch/examples mnist/main.py: Adadelta + StepLR(gamma=0.7), dropout, nll_loss on
    log_softmax, the `batch_idx % log_interval` print with its format string."""
    return _mnist(wrap)


@program("model")
def prog_mnist_adadelta_steplr_model(wrap):
    """mnist/main.py with `to_graph(model)` inside the eager train loop."""
    return _mnist(wrap)


class TinyTransformerLM(nn.Module):
    """word_language_model/model.py TransformerModel, tiny."""

    def __init__(self, ntoken=11, ninp=8, nhead=2, nhid=16, nlayers=1, dropout=0.1):
        super().__init__()
        self.pos_drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers,
                                                         enable_nested_tensor=False)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def forward(self, src):
        mask = self._generate_square_subsequent_mask(len(src))
        src = self.encoder(src) * math.sqrt(self.ninp)
        src = self.pos_drop(src)
        output = self.transformer_encoder(src, mask)
        return F.log_softmax(self.decoder(output), dim=-1)


def _wlm_batches(n=5, bptt=6, bsz=3, ntoken=11):
    g = _gen(3)
    data = torch.randint(0, ntoken, (bptt * n + 1, bsz), generator=g)
    return [(data[i * bptt:(i + 1) * bptt], data[i * bptt + 1:(i + 1) * bptt + 1].reshape(-1))
            for i in range(n)]


def _wlm(wrap):
    net = TinyTransformerLM()
    model = wrap(net)
    criterion = nn.NLLLoss()
    lr, clip = 2.0, 0.25
    log = {"total_loss": 0.0, "batch": 0}

    def train_step(data, targets):
        model.train()
        model.zero_grad()
        output = model(data)
        output = output.view(-1, 11)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        for p in net.parameters():
            p.data.add_(p.grad, alpha=-lr)
        log["total_loss"] += loss.item()
        log["batch"] += 1
        if log["batch"] % 2 == 0:
            cur_loss = log["total_loss"] / 2
            print('| {:5d} batches | lr {:02.2f} | loss {:5.2f} | ppl {:8.2f}'.format(
                log["batch"], lr, cur_loss, math.exp(cur_loss)))
            log["total_loss"] = 0.
        return loss.detach()
    return train_step, [net, log], _wlm_batches()


@program()
def prog_wlm_transformer_manual_sgd(wrap):
    """word_language_model/main.py with `--model Transformer`: causal mask from
    `log(tril(ones))`, dropout 0.1, clip_grad_norm_, `p.data.add_(p.grad, alpha=-lr)`,
    `math.exp(cur_loss)` in the log line."""
    return _wlm(wrap)


@program("model")
def prog_wlm_transformer_model(wrap):
    """word_language_model Transformer with `to_graph(model)` in the eager loop."""
    return _wlm(wrap)


class SuperResNet(nn.Module):
    """super_resolution/model.py, tiny (upscale 2)."""

    def __init__(self, upscale_factor=2):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 8, 5, 1, 2)
        self.conv2 = nn.Conv2d(8, 8, 3, 1, 1)
        self.conv3 = nn.Conv2d(8, upscale_factor ** 2, 3, 1, 1)
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        return self.pixel_shuffle(self.conv3(x))


def _sr_batches(n=5):
    g = _gen(5)
    return [(torch.rand(2, 1, 4, 4, generator=g), torch.rand(2, 1, 8, 8, generator=g))
            for _ in range(n)]


def _super_res(wrap, autocast=False):
    net = SuperResNet()
    model = wrap(net)
    criterion = nn.MSELoss()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    hist = {"epoch_loss": 0.0, "psnr": []}

    def train_step(inp, target):
        optimizer.zero_grad()
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(inp)
            loss = criterion(out.float(), target)
        else:
            loss = criterion(model(inp), target)
        hist["epoch_loss"] += loss.item()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            mse = criterion(model(inp).float(), target)
            psnr = 10 * math.log10(1 / mse.item())
        hist["psnr"].append(psnr)
        return loss.item(), psnr
    return train_step, [net, optimizer, hist], _sr_batches()


@program()
def prog_super_resolution_psnr(wrap):
    """super_resolution/main.py: PixelShuffle net, MSELoss, Adam, `epoch_loss += loss.item()`
    and `psnr = 10 * log10(1 / mse.item())` logged in a list."""
    return _super_res(wrap)


@program("model")
def prog_super_resolution_psnr_model(wrap):
    """super_resolution with `to_graph(model)` (called twice per step: train and PSNR)."""
    return _super_res(wrap)


@program()
def prog_super_resolution_bf16(wrap):
    """super_resolution under CPU bf16 autocast (loss in float32 outside the region)."""
    return _super_res(wrap, autocast=True)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 16)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(16, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.dropout(F.relu(self.affine1(x)))
        return F.softmax(self.affine2(x), dim=1)


def _reinforce(wrap):
    net = Policy()
    policy = wrap(net)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    eps = torch.finfo(torch.float32).eps
    gamma = 0.99
    running = {"reward": 10.0}

    def episode(states):
        for t in range(states.shape[0]):
            probs = policy(states[t:t + 1])
            m = torch.distributions.Categorical(probs)
            action = m.sample()
            net.saved_log_probs.append(m.log_prob(action))
            net.rewards.append(float(action.item() == 0) + 0.5)
        R = 0
        policy_loss = []
        returns = collections.deque()
        for r in net.rewards[::-1]:
            R = r + gamma * R
            returns.appendleft(R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(net.saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        ep_reward = sum(net.rewards)
        running["reward"] = 0.05 * ep_reward + (1 - 0.05) * running["reward"]
        del net.rewards[:]
        del net.saved_log_probs[:]
        return policy_loss.detach(), ep_reward
    g = _gen(9)
    return episode, [net, optimizer, running], [(torch.randn(4, 4, generator=g),)
                                                for _ in range(5)]


@program()
def prog_reinforce_returns_deque(wrap):
    """reinforcement_learning/reinforce.py finish_episode: sampled actions, rewards from
    `action.item()`, returns built in a deque, normalised with eps, `del rewards[:]`."""
    return _reinforce(wrap)


@program("model")
def prog_reinforce_returns_deque_model(wrap):
    """reinforce.py with `to_graph(policy)` (dropout 0.6) in the eager episode."""
    return _reinforce(wrap)


SavedAction = collections.namedtuple('SavedAction', ['log_prob', 'value'])


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 16)
        self.action_head = nn.Linear(16, 2)
        self.value_head = nn.Linear(16, 1)
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        return F.softmax(self.action_head(x), dim=-1), self.value_head(x)


@program()
def prog_actor_critic_saved_actions(wrap):
    """reinforcement_learning/actor_critic.py: SavedAction namedtuples on the model,
    smooth_l1_loss(value, torch.tensor([R])), `torch.stack(policy_losses).sum() + ...`."""
    model = ActorCritic()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    gamma = 0.99

    def episode(states):
        for t in range(states.shape[0]):
            probs, state_value = model(states[t])
            m = torch.distributions.Categorical(probs)
            action = m.sample()
            model.saved_actions.append(SavedAction(m.log_prob(action), state_value))
            model.rewards.append(1.0 - 0.25 * action.item())
        R = 0
        saved_actions = model.saved_actions
        policy_losses, value_losses, returns = [], [], []
        for r in model.rewards[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + 1e-6)
        for (log_prob, value), R in zip(saved_actions, returns):
            advantage = R - value.item()
            policy_losses.append(-log_prob * advantage)
            value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
        optimizer.zero_grad()
        loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
        loss.backward()
        optimizer.step()
        del model.rewards[:]
        del model.saved_actions[:]
        return loss.item()
    g = _gen(11)
    return episode, [model, optimizer], [(torch.randn(4, 4, generator=g),) for _ in range(5)]


# ================================================================ CleanRL
class Agent(nn.Module):
    def __init__(self, obs=4, act=2):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(obs, 16), nn.Tanh(), nn.Linear(16, 1))
        self.actor = nn.Sequential(nn.Linear(obs, 16), nn.Tanh(), nn.Linear(16, act))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = torch.distributions.Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def _ppo_rollouts(n=4, batch=8, obs=4):
    g = _gen(13)
    out = []
    for _ in range(n):
        b_obs = torch.randn(batch, obs, generator=g)
        b_actions = torch.randint(0, 2, (batch,), generator=g)
        b_logprobs = -torch.rand(batch, generator=g) - 0.3
        b_advantages = torch.randn(batch, generator=g)
        b_values = torch.randn(batch, generator=g)
        b_returns = b_advantages + b_values
        out.append((b_obs, b_actions, b_logprobs, b_advantages, b_returns, b_values))
    return out


@program()
def prog_cleanrl_ppo_update_epochs(wrap):
    """CleanRL ppo.py update phase: `update_epochs` x minibatches over `randperm` indices,
    `norm_adv`, clipped pg loss via `torch.max`, clipped value loss, entropy bonus,
    `clipfracs += [...item()]`, `approx_kl` under no_grad, clip_grad_norm_(0.5)."""
    agent = Agent()
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    clip_coef, ent_coef, vf_coef, minibatch = 0.2, 0.01, 0.5, 4
    stats = {"clipfracs": []}

    def update(b_obs, b_actions, b_logprobs, b_advantages, b_returns, b_values):
        b_inds = torch.randperm(8)
        for epoch in range(2):
            for start in range(0, 8, minibatch):
                mb_inds = b_inds[start:start + minibatch]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                    b_obs[mb_inds], b_actions[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()
                with torch.no_grad():
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    stats["clipfracs"] += [((ratio - 1.0).abs() > clip_coef).float().mean().item()]
                mb_advantages = b_advantages[mb_inds]
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()
                newvalue = newvalue.view(-1)
                v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                v_clipped = b_values[mb_inds] + torch.clamp(
                    newvalue - b_values[mb_inds], -clip_coef, clip_coef)
                v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                entropy_loss = entropy.mean()
                loss = pg_loss - ent_coef * entropy_loss + v_loss * vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()
        return {"losses/value_loss": v_loss.item(), "losses/policy_loss": pg_loss.item(),
                "losses/old_approx_kl": old_approx_kl.item(),
                "losses/approx_kl": approx_kl.item()}
    return update, [agent, optimizer, stats], _ppo_rollouts()


class QNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.network = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x):
        return self.network(x)


def _dqn_batches(n=6, b=5):
    g = _gen(17)
    return [(torch.randn(b, 4, generator=g), torch.randint(0, 2, (b, 1), generator=g),
             torch.randn(b, generator=g), torch.randn(b, 4, generator=g),
             (torch.rand(b, generator=g) < 0.3).float()) for _ in range(n)]


def _dqn(wrap):
    qn, tn = QNetwork(), QNetwork()
    tn.load_state_dict(qn.state_dict())
    q_network, target_network = wrap(qn), wrap(tn)
    optimizer = torch.optim.Adam(qn.parameters(), lr=1e-3)
    gamma, tau, target_network_frequency = 0.99, 0.5, 2
    global_step = 0

    def train(obs, actions, rewards, next_obs, dones):
        nonlocal global_step
        global_step += 1
        with torch.no_grad():
            target_max, _ = target_network(next_obs).max(dim=1)
            td_target = rewards.flatten() + gamma * target_max * (1 - dones.flatten())
        old_val = q_network(obs).gather(1, actions).squeeze()
        loss = F.mse_loss(td_target, old_val)
        if global_step % 2 == 0:
            print("losses/td_loss", loss.item(), global_step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if global_step % target_network_frequency == 0:
            for target_network_param, q_network_param in zip(tn.parameters(), qn.parameters()):
                target_network_param.data.copy_(
                    tau * q_network_param.data + (1.0 - tau) * target_network_param.data)
        return old_val.mean().item()
    return train, [qn, tn, optimizer], _dqn_batches()


@program()
def prog_cleanrl_dqn_soft_target(wrap):
    """CleanRL dqn.py training block: no_grad TD target from the target network,
    `gather(1, actions)`, a `global_step` nonlocal, soft target update
    `target_param.data.copy_(tau * q.data + (1 - tau) * target.data)` every k steps."""
    return _dqn(wrap)


@program("model")
def prog_cleanrl_dqn_soft_target_model(wrap):
    """dqn.py with both networks `to_graph`-converted, the update loop eager."""
    return _dqn(wrap)


def linear_schedule(start_e, end_e, duration, t):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def _epsilon_greedy(choose, n):
    qn = QNetwork()
    optimizer = torch.optim.SGD(qn.parameters(), lr=0.1)
    state = {"t": 0}

    def act_and_learn(obs, reward):
        epsilon = linear_schedule(1.0, 0.05, 4, state["t"])
        state["t"] += 1
        action = choose(qn, obs, epsilon)
        q = qn(obs)[action]
        loss = (q - reward) ** 2
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return action, loss.detach()
    g = _gen(19)
    return act_and_learn, [qn, optimizer, state], [
        (torch.randn(4, generator=g), torch.randn((), generator=g)) for _ in range(n)]


@program()
def prog_dqn_epsilon_greedy_torch_rand(wrap):
    """CleanRL dqn.py action selection with torch's RNG instead of `random.random()`:
    `if torch.rand(()) < epsilon: action = torch.randint(...)` else argmax (a tensor `if`
    whose branches draw different amounts of random numbers), then one TD step."""
    def choose(qn, obs, epsilon):
        if torch.rand(()) < epsilon:
            action = torch.randint(0, 2, ())
        else:
            action = qn(obs).argmax()
        return action
    return _epsilon_greedy(choose, 8)


@program()
def prog_dqn_epsilon_greedy_python_random(wrap):
    """The same with CleanRL's own `random.random() < epsilon` (Python randomness: a graph
    would freeze one draw, so it must fall back)."""
    def choose(qn, obs, epsilon):
        if random.random() < epsilon:
            return random.randint(0, 1)
        return qn(obs).argmax().item()
    return _epsilon_greedy(choose, 5)


# ================================================================ timm train.py
class SeededMixup:
    """timm.data.Mixup's shape (mixup or cutmix per batch, label smoothing into a soft
    target), drawing from a `torch.Generator` it owns instead of numpy."""

    def __init__(self, num_classes, alpha=1.0, cutmix_alpha=1.0, switch_prob=0.5,
                 label_smoothing=0.1, seed=42):
        self.num_classes = num_classes
        self.alpha, self.cutmix_alpha, self.switch_prob = alpha, cutmix_alpha, switch_prob
        self.label_smoothing = label_smoothing
        self.gen = torch.Generator().manual_seed(seed)

    def _one_hot(self, y, on, off):
        return torch.full((y.size(0), self.num_classes), off).scatter_(1, y.view(-1, 1), on)

    def _target(self, y, lam):
        off = self.label_smoothing / self.num_classes
        on = 1. - self.label_smoothing + off
        y1 = self._one_hot(y, on, off)
        y2 = self._one_hot(y.flip(0), on, off)
        return y1 * lam + y2 * (1. - lam)

    def __call__(self, x, y):
        use_cutmix = bool(torch.rand((), generator=self.gen) < self.switch_prob)
        a = self.cutmix_alpha if use_cutmix else self.alpha
        lam = float(torch._standard_gamma(torch.tensor([a, a])).div(2).clamp(0, 1)[0])
        if use_cutmix:
            H, W = x.shape[-2:]
            cut_rat = math.sqrt(1. - lam)
            ch, cw = int(H * cut_rat), int(W * cut_rat)
            cy = int(torch.randint(0, H, (), generator=self.gen))
            cx = int(torch.randint(0, W, (), generator=self.gen))
            yl, yh = max(cy - ch // 2, 0), min(cy + ch // 2, H)
            xl, xh = max(cx - cw // 2, 0), min(cx + cw // 2, W)
            x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
            lam = 1. - (yh - yl) * (xh - xl) / float(H * W)
        else:
            x.mul_(lam).add_(x.flip(0).mul_(1. - lam))
        return x, self._target(y, lam)


class SoftTargetCrossEntropy(nn.Module):
    def forward(self, x, target):
        loss = torch.sum(-target * F.log_softmax(x, dim=-1), dim=-1)
        return loss.mean()


class SmallCNN(nn.Module):
    def __init__(self, k=3):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, k)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return self.head(x.mean((2, 3)))


def _timm_mixup(wrap):
    net = SmallCNN()
    model = wrap(net)
    mixup_fn = SeededMixup(3)
    loss_fn = SoftTargetCrossEntropy()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                                weight_decay=1e-4)

    def train_one_batch(input, target):
        input, target = mixup_fn(input, target)
        output = model(input)
        loss = loss_fn(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()
    return train_one_batch, [net, optimizer, mixup_fn], _imgs(n=6, b=4)


@program()
def prog_timm_mixup_cutmix_seeded_generator(wrap):
    """timm train.py: Mixup/CutMix switched per batch by a seeded `torch.Generator` the
    mixer owns, box from `randint(generator=)`, SoftTargetCrossEntropy, SGD nesterov."""
    return _timm_mixup(wrap)


@program("model")
def prog_timm_mixup_cutmix_model(wrap):
    """timm mixup/cutmix with `to_graph(model)` (BatchNorm) in the eager loop."""
    return _timm_mixup(wrap)


class ModelEmaV3(nn.Module):
    """timm.utils.ModelEmaV3's shape: decay warmup and `lerp_` over state_dict() values."""

    def __init__(self, model, decay=0.9, use_warmup=True):
        super().__init__()
        self.module = copy.deepcopy(model).eval()
        self.decay = decay
        self.use_warmup = use_warmup
        self.step = 0

    def get_decay(self):
        if self.use_warmup:
            return min(self.decay, (1 + self.step) / (10 + self.step))
        return self.decay

    @torch.no_grad()
    def update(self, model):
        decay = self.get_decay()
        for ema_v, model_v in zip(self.module.state_dict().values(),
                                  model.state_dict().values()):
            if ema_v.is_floating_point():
                ema_v.lerp_(model_v, weight=1. - decay)
            else:
                ema_v.copy_(model_v)
        self.step += 1


@program()
def prog_timm_ema_v3_warmup(wrap):
    """timm ModelEmaV3: `min(decay, (1 + step) / (10 + step))` warmup, `lerp_` over
    `state_dict().values()` (BatchNorm buffers copied), updated after each optimizer step."""
    net = SmallCNN()
    ema = ModelEmaV3(net)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.05)

    def step(x, y):
        loss = F.cross_entropy(net(x), y, label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ema.update(net)
        return loss.detach()
    return step, [net, ema, optimizer], _imgs(n=5)


def _bad_batches(n, value, at=2):
    """``n`` batches; batch ``at`` holds one ``value`` (inf, nan) in its input."""
    out = _xy(n=n)
    x, y = out[at]
    x = x.clone()
    x[1, 2] = value
    out[at] = (x, y)
    return out


@program()
def prog_timm_clip_error_if_nonfinite(wrap):
    """timm/torchtitan: `clip_grad_norm_(params, 1.0, error_if_nonfinite=True)`; the third
    batch holds an inf, so both runs must raise RuntimeError there and keep going after."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0, error_if_nonfinite=True)
        optimizer.step()
        return loss.detach(), norm
    return step, [net, optimizer], _bad_batches(5, float("inf"))


@program()
def prog_skip_nonfinite_loss(wrap):
    """fairseq/timm-style guard: `if not torch.isfinite(loss): skipped += 1` (a tensor `if`)
    else backward, clip by norm and step; a nan batch in the middle."""
    net = mlp()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    counters = {"skipped": 0, "updates": 0}

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        if not torch.isfinite(loss):
            counters["skipped"] += 1
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
            counters["updates"] += 1
        return loss.detach()
    return step, [net, optimizer, counters], _bad_batches(6, float("nan"))


@program()
def prog_skip_nonfinite_grad_norm(wrap):
    """DeepSpeed/Megatron-style: `total_norm = clip_grad_norm_(...)`, then
    `if torch.isfinite(total_norm): optimizer.step()` else `zero_grad` and print a warning."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        total_norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 2.0)
        if torch.isfinite(total_norm):
            optimizer.step()
        else:
            print("skipping step: grad norm", total_norm.item())
            optimizer.zero_grad()
        return total_norm
    return step, [net, optimizer], _bad_batches(6, float("nan"))


# ================================================================ Lightning
class LitClassifier(nn.Module):
    """A LightningModule's shape without Lightning: `training_step(batch, batch_idx)`,
    `self.log(...)` into a dict of lists, `configure_optimizers` returning a scheduler dict."""

    def __init__(self):
        super().__init__()
        self.backbone = mlp()
        self.logged = {"train_loss": [], "train_acc": []}
        self.global_step = 0

    def log(self, name, value):
        self.logged[name].append(float(value))

    def forward(self, x):
        return self.backbone(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(-1) == y).float().mean()
        self.log("train_loss", loss)
        self.log("train_acc", acc)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


@program()
def prog_lightning_automatic_optimization(wrap):
    """Lightning's automatic optimization loop for one batch, converted whole: the module's
    `training_step`, `self.log`, zero_grad/backward/step, a per-step scheduler and
    `global_step += 1` on the module."""
    lit = LitClassifier()
    conf = lit.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    batch_idx = [0]

    def fit_batch(x, y):
        loss = lit.training_step((x, y), batch_idx[0])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        lit.global_step += 1
        batch_idx[0] += 1
        return loss.detach()
    return fit_batch, [lit, opt, sched, batch_idx], _xy()


@program()
def prog_lightning_training_step_method_converted(wrap):
    """`to_graph(lit.training_step)` (a bound method that logs on `self`), with Lightning's
    own backward/step run eagerly around it; batch_idx a Python int argument."""
    lit = LitClassifier()
    conf = lit.configure_optimizers()
    opt = conf["optimizer"]

    def driver(step_fn):
        calls = []
        for i, (x, y) in enumerate(_xy(n=5)):
            def call(step, x=x, y=y, i=i):
                loss = step((x, y), i)
                opt.zero_grad()
                loss.backward()
                opt.step()
                return loss.detach()
            calls.append(call)
        return calls
    return lit.training_step, [lit, opt], driver(None)


# ================================================================ accumulation
@program()
def prog_accum_index_argument(wrap):
    """HF/accelerate-free accumulation loop: `train_step(i, x, y)` with the loop index a Python
    int argument, `loss / k`, `if (i + 1) % k == 0: clip; step; zero_grad`."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.2)
    k = 3

    def train_step(i, x, y):
        loss = F.cross_entropy(net(x), y) / k
        loss.backward()
        if (i + 1) % k == 0:
            torch.nn.utils.clip_grad_value_(net.parameters(), 0.5)
            optimizer.step()
            optimizer.zero_grad()
        return loss.item() * k
    return train_step, [net, optimizer], [(i, x, y) for i, (x, y) in enumerate(_xy(n=7))]


@program()
def prog_accum_tensor_condition(wrap):
    """Accumulate until enough signal: a running loss kept as a tensor in a closure list,
    `if acc[0] > threshold:` (a tensor condition) steps, zeroes and resets the sum."""
    net = mlp()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    acc = [torch.zeros(())]
    steps = {"n": 0}

    def train_step(x, y):
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        acc[0] = acc[0] + loss.detach()
        if acc[0] > 2.5:
            optimizer.step()
            optimizer.zero_grad()
            acc[0] = torch.zeros(())
            steps["n"] += 1
        return loss.detach()
    return train_step, [net, optimizer, acc, steps], _xy(n=8)


# ================================================================ schedulers
@program()
def prog_plateau_max_mode_accuracy_tensor(wrap):
    """Keras-style `ReduceLROnPlateau(mode='max', threshold_mode='abs', cooldown=1,
    patience=0)` stepped with a tensor accuracy computed under no_grad in the step."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="max", factor=0.5, patience=0, threshold=0.01,
        threshold_mode="abs", cooldown=1)

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            acc = (net(x).argmax(1) == y).float().mean()
        sched.step(acc)
        return acc
    return step, [net, optimizer, sched], _xy(n=8)


@program()
def prog_onecycle_three_phase_momentum(wrap):
    """fastai-style OneCycleLR(three_phase=True, cycle_momentum=True) on SGD momentum (the
    scheduler writes `momentum` as well as `lr`), stepped inside the step."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.5, total_steps=8,
                                                three_phase=True)

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        sched.step()
        return loss.item(), sched.get_last_lr()[0], optimizer.param_groups[0]["momentum"]
    return step, [net, optimizer, sched], _xy(n=7)


@program()
def prog_cosine_warm_restarts_fractional_epoch(wrap):
    """The CosineAnnealingWarmRestarts docstring recipe: `scheduler.step(epoch + i / iters)`
    per batch, the batch index and epoch counters kept in a closure dict."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=1, T_mult=2)
    st = {"epoch": 0, "i": 0}
    iters = 3

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        sched.step(st["epoch"] + st["i"] / iters)
        st["i"] += 1
        if st["i"] == iters:
            st["i"] = 0
            st["epoch"] += 1
        return loss.detach()
    return step, [net, optimizer, sched, st], _xy(n=7)


@program()
def prog_cyclic_lr_triangular2(wrap):
    """CyclicLR(mode='triangular2') with momentum cycling, as in the CLR paper's scripts."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    sched = torch.optim.lr_scheduler.CyclicLR(optimizer, base_lr=0.01, max_lr=0.1,
                                              step_size_up=2, mode="triangular2")

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        sched.step()
        return loss.detach()
    return step, [net, optimizer, sched], _xy(n=7)


@program()
def prog_layerwise_lr_decay_lambda_per_group(wrap):
    """BEiT/timm layer-wise lr decay: one param group per layer with `lr_scale`, no weight
    decay on biases, and a LambdaLR with one warmup-cosine lambda per group."""
    net = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 3))
    layers = [net[0], net[2], net[4]]
    groups = []
    for depth, layer in enumerate(layers):
        scale = 0.75 ** (len(layers) - 1 - depth)
        groups.append({"params": [layer.weight], "weight_decay": 0.05, "lr_scale": scale})
        groups.append({"params": [layer.bias], "weight_decay": 0.0, "lr_scale": scale})
    optimizer = torch.optim.AdamW(groups, lr=1e-2)

    def make(scale):
        return lambda s: scale * (s + 1) / 3 if s < 2 else \
            scale * 0.5 * (1 + math.cos(math.pi * (s - 2) / 6))
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, [make(g["lr_scale"]) for g in optimizer.param_groups])

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        sched.step()
        return [g["lr"] for g in optimizer.param_groups]
    return step, [net, optimizer, sched], _xy(n=6)


@program()
def prog_freeze_unfreeze_between_calls(wrap):
    """Transfer learning (the torchvision finetuning tutorial): the backbone frozen by the
    eager loop with `requires_grad_(False)` after 2 steps and unfrozen after 4."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.9)

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()
    data = _xy(n=6)

    def freeze(flag):
        def call(step):
            net[0].requires_grad_(not flag)
            if flag:
                net[0].weight.grad = None
                net[0].bias.grad = None
            return None
        return call
    calls = data[:2] + [freeze(True)] + data[2:4] + [freeze(False)] + data[4:]
    return step, [net, optimizer], calls


# ================================================================ custom autograd / hooks
class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        return torch.round(x * scale) / scale

    @staticmethod
    def backward(ctx, g):
        return g, None


class QuantNet(nn.Module):
    """QAT-style fake quantization with a straight-through estimator (custom Function)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(5, 8), nn.Linear(8, 3)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        h = RoundSTE.apply(h, 4.0)
        w = RoundSTE.apply(self.fc2.weight, 8.0)
        return F.linear(h, w, self.fc2.bias)


def _ste(wrap):
    net = QuantNet()
    model = wrap(net)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)

    return _plain_step(model, optimizer), [net, optimizer], _xy()


@program()
def prog_custom_function_ste_quant(wrap):
    """Quantization-aware training with a straight-through `torch.autograd.Function`
    (round forward, identity backward) on activations and weights."""
    return _ste(wrap)


@program("model")
def prog_custom_function_ste_quant_model(wrap):
    """The STE model `to_graph`-converted inside an eager step."""
    return _ste(wrap)


class SwishFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * (s * (1 + x * (1 - s)))


@program()
def prog_custom_function_memory_efficient_swish(wrap):
    """EfficientNet-PyTorch's MemoryEfficientSwish: `save_for_backward` + a hand-written
    backward under `once_differentiable`."""
    net = nn.Sequential(nn.Linear(5, 8), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        optimizer.zero_grad()
        h = SwishFn.apply(net[0](x))
        loss = F.cross_entropy(net[1](h), y)
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step, [net, optimizer], _xy()


def _deep_supervision(wrap):
    net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    aux_head = nn.Linear(8, 3)
    feats = {}
    net[1].register_forward_hook(lambda m, i, o: feats.__setitem__("mid", o))
    model = wrap(net)
    optimizer = torch.optim.SGD(list(net.parameters()) + list(aux_head.parameters()), lr=0.1)

    def step(x, y):
        optimizer.zero_grad()
        out = model(x)
        aux = aux_head(feats["mid"])
        loss = F.cross_entropy(out, y) + 0.3 * F.cross_entropy(aux, y)
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step, [net, aux_head, optimizer], _xy()


@program()
def prog_forward_hook_deep_supervision(wrap):
    """Feature extraction by forward hook (perceptual/deep-supervision losses): a hook that
    stores a block's output in a dict, registered once, read by an auxiliary head."""
    return _deep_supervision(wrap)


@program()
def prog_forward_pre_hook_input_scaling(wrap):
    """A forward pre-hook normalising the input (registered once), counting its calls on a
    plain dict."""
    net = mlp()
    seen = {"n": 0}

    def pre(m, args):
        seen["n"] += 1
        x, = args
        return ((x - x.mean(0)) / (x.std(0) + 1e-5),)
    net.register_forward_pre_hook(pre)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    return _plain_step(net, optimizer), [net, optimizer, seen], _xy()


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


def _parametrized(wrap, cached=False):
    net = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 3))
    parametrize.register_parametrization(net[2], "weight", Symmetric())
    model = wrap(net)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)

    def step(x, y):
        optimizer.zero_grad()
        if cached:
            with parametrize.cached():
                loss = F.cross_entropy(model(x), y) + 1e-3 * net[2].weight.pow(2).sum()
        else:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step, [net, optimizer], _xy()


@program()
def prog_parametrize_symmetric(wrap):
    """The torch.nn.utils.parametrize tutorial: a `Symmetric` parametrization on a hidden
    layer's weight, trained with Adam (`parametrizations.weight.original` updates)."""
    return _parametrized(wrap)


@program("model")
def prog_parametrize_symmetric_model(wrap):
    """The parametrized model `to_graph`-converted inside an eager step."""
    return _parametrized(wrap)


@program()
def prog_parametrize_cached(wrap):
    """The tutorial's `with parametrize.cached():` around a forward that reads the
    parametrized weight twice (model + an L2 penalty)."""
    return _parametrized(wrap, cached=True)


@program()
def prog_hutchinson_hessian_trace_penalty(wrap):
    """Hessian-trace regularisation (AdaHessian / PyHessian's Hutchinson estimator):
    Rademacher vectors, `autograd.grad(create_graph=True)`, a second `autograd.grad` of
    `(g * v).sum()`; the penalty is added to the loss."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    params = list(net.parameters())

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        grads = torch.autograd.grad(loss, params, create_graph=True)
        vs = [torch.randint_like(p, 0, 2) * 2 - 1 for p in params]
        gv = sum((g * v).sum() for g, v in zip(grads, vs))
        hvs = torch.autograd.grad(gv, params, create_graph=True)
        trace = sum((hv * v).sum() for hv, v in zip(hvs, vs))
        total = loss + 1e-2 * trace
        total.backward()
        optimizer.step()
        return loss.detach(), trace.detach()
    return step, [net, optimizer], _xy(n=5)


def _sngan(wrap):
    from torch.nn.utils import spectral_norm
    G = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 4))
    D = nn.Sequential(spectral_norm(nn.Linear(4, 8)), nn.LeakyReLU(0.2),
                      spectral_norm(nn.Linear(8, 1)))
    netG, netD = wrap(G), wrap(D)
    optD = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.0, 0.9))
    optG = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.0, 0.9))
    n_critic = 2

    def step(real):
        for _ in range(n_critic):
            z = torch.randn(real.size(0), 3)
            fake = netG(z).detach()
            d_loss = F.relu(1.0 - netD(real)).mean() + F.relu(1.0 + netD(fake)).mean()
            optD.zero_grad()
            d_loss.backward()
            optD.step()
        z = torch.randn(real.size(0), 3)
        g_loss = -netD(netG(z)).mean()
        optG.zero_grad()
        g_loss.backward()
        optG.step()
        return d_loss.item(), g_loss.item()
    g = _gen(23)
    return step, [G, D, optD, optG], [(torch.randn(6, 4, generator=g),) for _ in range(5)]


@program()
def prog_sngan_hinge_n_critic(wrap):
    """SN-GAN (mimicry/pytorch-spectral-normalization-gan): hinge loss, old-style
    `spectral_norm` (weight_orig/weight_u buffers) on D, `n_critic` D steps per G step, two
    Adams with betas (0, 0.9)."""
    return _sngan(wrap)


@program("model")
def prog_sngan_hinge_n_critic_model(wrap):
    """SN-GAN with G and D `to_graph`-converted, the loop eager."""
    return _sngan(wrap)


# ================================================================ checkpoint resume
def _save(objs):
    buf = io.BytesIO()
    torch.save({k: v.state_dict() for k, v in objs.items()}, buf)
    buf.seek(0)
    return buf


@program()
def prog_checkpoint_rewind_same_objects(wrap):
    """The ImageNet example's `--resume`: `torch.save({'state_dict', 'optimizer',
    'scheduler'})` after step 2, two more steps, then `load_state_dict` of all three into the
    *same* objects (rewinding Adam's moments and the scheduler) and training on."""
    net = mlp()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
    saved = {}

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        sched.step()
        return loss.detach(), sched.get_last_lr()[0]

    def save(step):
        saved["buf"] = _save({"state_dict": net, "optimizer": optimizer, "scheduler": sched})

    def load(step):
        ck = torch.load(saved["buf"], weights_only=True)
        net.load_state_dict(ck["state_dict"])
        optimizer.load_state_dict(ck["optimizer"])
        sched.load_state_dict(ck["scheduler"])
    d = _xy(n=6)
    return step, [net, optimizer, sched], d[:2] + [save] + d[2:4] + [load] + d[4:]


@program()
def prog_checkpoint_resume_fresh_objects(wrap):
    """Resume into *new* objects (a restarted job): `train_step(model, optimizer, x, y)`
    takes them as arguments; after step 3 the loop saves, builds a fresh model/optimizer,
    loads the checkpoint and passes the new ones."""
    holder = {"model": mlp(), "opt": None}
    holder["opt"] = torch.optim.SGD(holder["model"].parameters(), lr=0.1, momentum=0.9)

    def train_step(model, optimizer, x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def resume(step):
        buf = _save({"model": holder["model"], "opt": holder["opt"]})
        ck = torch.load(buf, weights_only=True)
        model = mlp()
        model.load_state_dict(ck["model"])
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        opt.load_state_dict(ck["opt"])
        holder["model"], holder["opt"] = model, opt

    def call(x, y):
        return lambda step: step(holder["model"], holder["opt"], x, y)
    d = [call(x, y) for x, y in _xy(n=6)]
    return train_step, [holder], d[:3] + [resume] + d[3:]


# ================================================================ losses with data-dependent parts
class SupConLoss(nn.Module):
    """SupContrast's SupConLoss (one view), in-batch label mask and self-contrast mask."""

    def __init__(self, temperature=0.5):
        super().__init__()
        self.temperature = temperature

    def forward(self, features, labels):
        b = features.shape[0]
        labels = labels.contiguous().view(-1, 1)
        mask = torch.eq(labels, labels.T).float()
        anchor_dot_contrast = torch.div(features @ features.T, self.temperature)
        logits_max, _ = torch.max(anchor_dot_contrast, dim=1, keepdim=True)
        logits = anchor_dot_contrast - logits_max.detach()
        logits_mask = torch.scatter(torch.ones_like(mask), 1, torch.arange(b).view(-1, 1), 0)
        mask = mask * logits_mask
        exp_logits = torch.exp(logits) * logits_mask
        log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
        mask_pos_pairs = mask.sum(1)
        mask_pos_pairs = torch.where(mask_pos_pairs < 1e-6, 1, mask_pos_pairs)
        mean_log_prob_pos = (mask * log_prob).sum(1) / mask_pos_pairs
        return -mean_log_prob_pos.mean()


@program()
def prog_supcon_label_mask(wrap):
    """SupContrast (Khosla et al.) loss: label-equality mask, `scatter` self mask,
    `torch.where(mask_pos_pairs < 1e-6, 1, ...)` for anchors without positives."""
    enc = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 4))
    crit = SupConLoss()
    optimizer = torch.optim.SGD(enc.parameters(), lr=0.1)

    def step(x, y):
        feats = F.normalize(enc(x), dim=1)
        loss = crit(feats, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()
    return step, [enc, optimizer], _xy(k=4)


@program()
def prog_ohem_topk(wrap):
    """Online hard example mining (OHEM, detectron-style): per-sample CE, keep the top
    `max(1, int(ratio * b))` with `topk`, mean of those."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        losses = F.cross_entropy(net(x), y, reduction="none")
        k = max(1, int(0.5 * losses.numel()))
        hard, idx = losses.topk(k)
        loss = hard.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach(), idx
    return step, [net, optimizer], _xy()


@program()
def prog_ssd_hard_negative_mining(wrap):
    """ssd.pytorch MultiBoxLoss: `num_neg = clamp(3 * num_pos, max=n - 1)` from a tensor count,
    the double-`sort` rank trick `idx_rank < num_neg` for negatives, CE on pos + neg only,
    divided by `num_pos.sum()`."""
    net = nn.Linear(5, 3)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, conf_t):
        conf = net(x).view(2, -1, 3)                  # 2 images x priors
        conf_t = conf_t.view(2, -1)
        pos = conf_t > 0
        num_pos = pos.long().sum(1, keepdim=True)
        loss_c = F.cross_entropy(conf.reshape(-1, 3), conf_t.reshape(-1),
                                 reduction="none").view(2, -1)
        loss_c = loss_c.detach().clone()
        loss_c[pos] = 0
        _, loss_idx = loss_c.sort(1, descending=True)
        _, idx_rank = loss_idx.sort(1)
        num_neg = torch.clamp(3 * num_pos, max=pos.size(1) - 1)
        neg = idx_rank < num_neg.expand_as(idx_rank)
        sel = (pos | neg)
        loss = F.cross_entropy(conf[sel], conf_t[sel], reduction="sum")
        N = num_pos.sum().clamp(min=1)
        loss = loss / N
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach(), sel
    g = _gen(29)
    return step, [net, optimizer], [
        (torch.randn(8, 5, generator=g),
         torch.randint(0, 3, (8,), generator=g) * (torch.rand(8, generator=g) < 0.4))
        for _ in range(5)]


def focal_loss(logits, target, gamma=2.0, alpha=0.25, ignore_index=-100):
    valid = target != ignore_index
    if valid.sum() == 0:
        return logits.sum() * 0.0
    logits, target = logits[valid], target[valid]
    logpt = -F.cross_entropy(logits, target, reduction="none")
    pt = logpt.exp()
    loss = -alpha * (1 - pt) ** gamma * logpt
    return loss.mean()


def _ignored_batches(all_ignored_at=None):
    out = []
    for i, (x, y) in enumerate(_xy(n=6)):
        y = y.clone()
        y[::3] = -100
        if i == all_ignored_at:
            y[:] = -100
        out.append((x, y))
    return out


@program()
def prog_focal_loss_ignore_index(wrap):
    """Segmentation-style focal loss with `ignore_index`: boolean-mask the valid targets,
    an early `return logits.sum() * 0.0` (a tensor `if`) when a batch has none."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        loss = focal_loss(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step, [net, optimizer], _ignored_batches(all_ignored_at=3)


@program()
def prog_ce_ignore_index_all_ignored_skip(wrap):
    """Token classification (HF run_ner-style labels -100): `cross_entropy(ignore_index=-100)`
    is nan on an all-ignored batch; `if torch.isnan(loss): print(...)` skips the update."""
    net = mlp()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
    nskip = [0]

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y, ignore_index=-100)
        if torch.isnan(loss):
            print("all labels ignored, skipping")
            nskip[0] += 1
        else:
            loss.backward()
            optimizer.step()
        return loss.detach()
    return step, [net, optimizer, nskip], _ignored_batches(all_ignored_at=2)


# ================================================================ embeddings and optimizers
class BagModel(nn.Module):
    def __init__(self, max_norm=None, sparse=False):
        super().__init__()
        self.emb = nn.Embedding(12, 4, max_norm=max_norm, sparse=sparse)
        self.fc = nn.Linear(4, 3)

    def forward(self, ids):
        return self.fc(self.emb(ids).mean(1))


def _ids(n=6, b=4, t=5):
    g = _gen(31)
    return [(torch.randint(0, 12, (b, t), generator=g), torch.randint(0, 3, (b,), generator=g))
            for _ in range(n)]


def _max_norm(wrap):
    net = BagModel(max_norm=1.0)
    with torch.no_grad():
        net.emb.weight.mul_(3.0)
    model = wrap(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
    return _plain_step(model, optimizer), [net, optimizer], _ids()


@program()
def prog_embedding_max_norm(wrap):
    """`nn.Embedding(max_norm=1.0)` (StarSpace/fastText-style): the forward renormalises the
    looked-up rows of the weight in place, under no_grad, every call."""
    return _max_norm(wrap)


@program("model")
def prog_embedding_max_norm_model(wrap):
    """The max_norm embedding model `to_graph`-converted inside an eager step."""
    return _max_norm(wrap)


@program()
def prog_sparse_embedding_sparse_adam(wrap):
    """Recommenders (the PyTorch docs' sparse-gradient recipe): `nn.Embedding(sparse=True)`
    trained with `SparseAdam`, the dense head with Adam: two optimizers in one step."""
    net = BagModel(sparse=True)
    opt_sparse = torch.optim.SparseAdam(list(net.emb.parameters()), lr=1e-2)
    opt_dense = torch.optim.Adam(list(net.fc.parameters()), lr=1e-2)

    def step(ids, y):
        opt_sparse.zero_grad()
        opt_dense.zero_grad()
        loss = F.cross_entropy(net(ids), y)
        loss.backward()
        opt_sparse.step()
        opt_dense.step()
        return loss.detach()
    return step, [net, opt_sparse, opt_dense], _ids()


OPTIMIZERS = {
    "rmsprop_centered": lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.9, centered=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01),
    "nadam_decoupled": lambda p: torch.optim.NAdam(p, lr=1e-2, weight_decay=0.01,
                                                   decoupled_weight_decay=True),
    "radam": lambda p: torch.optim.RAdam(p, lr=1e-2),
    "adamax": lambda p: torch.optim.Adamax(p, lr=1e-2),
    "asgd": lambda p: torch.optim.ASGD(p, lr=1e-2, t0=2),
    "rprop": lambda p: torch.optim.Rprop(p, lr=1e-2),
    "adam_amsgrad_maximize": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True,
                                                        maximize=True),
    "sgd_dampening_nesterov_off": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9,
                                                            dampening=0.1),
}


def _optimizer_prog(kind):
    def prog(wrap):
        net = mlp()
        optimizer = OPTIMIZERS[kind](net.parameters())

        def step(x, y):
            optimizer.zero_grad(set_to_none=False)
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            return loss.detach()
        return step, [net, optimizer], _xy(n=5)
    prog.__name__ = f"prog_optimizer_{kind}"
    prog.__doc__ = (f"timm's optimizer factory picking `{kind}`: a plain step with "
                    "`zero_grad(set_to_none=False)`, optimizer state compared per step.")
    return program()(prog)


for _kind in OPTIMIZERS:
    _optimizer_prog(_kind)


# ================================================================ more scripts
class Seq2Seq(nn.Module):
    """The PyTorch seq2seq tutorial (EncoderRNN / DecoderRNN), tiny, batch of one."""

    def __init__(self, vocab=7, hidden=8):
        super().__init__()
        self.enc_emb = nn.Embedding(vocab, hidden)
        self.enc = nn.GRU(hidden, hidden, batch_first=True)
        self.dec_emb = nn.Embedding(vocab, hidden)
        self.dec = nn.GRU(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def decode_step(self, tok, h):
        o, h = self.dec(F.relu(self.dec_emb(tok.view(1, 1))), h)
        return F.log_softmax(self.out(o[:, 0]), dim=-1), h


def _seq_batches(n=5):
    g = _gen(37)
    return [(torch.randint(1, 7, (1, 4), generator=g), torch.randint(1, 7, (4,), generator=g))
            for _ in range(n)]


@program()
def prog_seq2seq_teacher_forcing_torch_rand(wrap):
    """The seq2seq tutorial's `train()` with `use_teacher_forcing = torch.rand(()) < 0.5`
    (a tensor `if` choosing between two decoding loops; the greedy one feeds back
    `topi.squeeze().detach()`), NLLLoss summed over steps, two SGD optimizers."""
    model = Seq2Seq()
    enc_opt = torch.optim.SGD(list(model.enc_emb.parameters()) + list(model.enc.parameters()),
                              lr=0.1)
    dec_opt = torch.optim.SGD(list(model.dec_emb.parameters()) + list(model.dec.parameters())
                              + list(model.out.parameters()), lr=0.1)
    criterion = nn.NLLLoss()

    def train(input_tensor, target_tensor):
        enc_opt.zero_grad()
        dec_opt.zero_grad()
        _, h = model.enc(model.enc_emb(input_tensor))
        decoder_input = torch.tensor(0)
        loss = 0.0
        use_teacher_forcing = torch.rand(()) < 0.5
        if use_teacher_forcing:
            for di in range(target_tensor.size(0)):
                out, h = model.decode_step(decoder_input, h)
                loss = loss + criterion(out, target_tensor[di:di + 1])
                decoder_input = target_tensor[di]
        else:
            for di in range(target_tensor.size(0)):
                out, h = model.decode_step(decoder_input, h)
                topv, topi = out.topk(1)
                decoder_input = topi.squeeze().detach()
                loss = loss + criterion(out, target_tensor[di:di + 1])
        loss.backward()
        enc_opt.step()
        dec_opt.step()
        return loss.item() / target_tensor.size(0)
    return train, [model, enc_opt, dec_opt], _seq_batches(6)


class CenterLoss(nn.Module):
    """KaiyangZhou/pytorch-center-loss, tiny."""

    def __init__(self, num_classes=3, feat_dim=2):
        super().__init__()
        self.centers = nn.Parameter(torch.randn(num_classes, feat_dim))

    def forward(self, x, labels):
        distmat = (x.unsqueeze(1) - self.centers.unsqueeze(0)).pow(2).sum(-1)
        mask = labels.unsqueeze(1).eq(torch.arange(self.centers.size(0)))
        return (distmat * mask.float()).clamp(min=1e-12, max=1e12).sum() / x.size(0)


@program()
def prog_center_loss_two_optimizers(wrap):
    """pytorch-center-loss main.py: `loss = xent + weight_cent * cent`, its own SGD for the
    centers, and `for param in criterion_cent.parameters(): param.grad.data *= (1. /
    weight_cent)` before `optimizer_centloss.step()`."""
    feat = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2))
    head = nn.Linear(2, 3)
    criterion_cent = CenterLoss()
    optimizer_model = torch.optim.SGD(list(feat.parameters()) + list(head.parameters()),
                                      lr=0.1, momentum=0.9, weight_decay=5e-4)
    optimizer_centloss = torch.optim.SGD(criterion_cent.parameters(), lr=0.5)
    weight_cent = 0.1

    def step(data, labels):
        features = feat(data)
        outputs = head(features)
        loss_xent = F.cross_entropy(outputs, labels)
        loss_cent = criterion_cent(features, labels)
        loss = loss_xent + weight_cent * loss_cent
        optimizer_model.zero_grad()
        optimizer_centloss.zero_grad()
        loss.backward()
        optimizer_model.step()
        for param in criterion_cent.parameters():
            param.grad.data *= (1. / weight_cent)
        optimizer_centloss.step()
        return loss_xent.item(), loss_cent.item()
    return step, [feat, head, criterion_cent, optimizer_model, optimizer_centloss], _xy()


@program()
def prog_annealed_gradient_noise(wrap):
    """Neelakantan et al. gradient noise: `std = eta / (1 + t) ** 0.55` from a step counter
    on a trainer object, `p.grad.add_(torch.randn_like(p.grad) * std)` before the step."""
    class Trainer:
        def __init__(self):
            self.model = mlp()
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
            self.t = 0

        def step(self, x, y):
            self.opt.zero_grad()
            loss = F.cross_entropy(self.model(x), y)
            loss.backward()
            std = 0.3 / (1 + self.t) ** 0.55
            for p in self.model.parameters():
                p.grad.add_(torch.randn_like(p.grad) * std)
            self.opt.step()
            self.t += 1
            return loss.detach()
    tr = Trainer()
    return tr.step, [tr.model, tr.opt, tr], _xy()


@program()
def prog_manual_seed_inside_step(wrap):
    """Reproducibility helpers that reseed per step (`torch.manual_seed(base_seed + step)`
    before a dropout forward, as some RL and augmentation code does), counter on a dict."""
    net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    st = {"step": 0}

    def step(x, y):
        torch.manual_seed(1234 + st["step"])
        st["step"] += 1
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step, [net, optimizer, st], _xy()


@program()
def prog_activation_stats_forward_hooks(wrap):
    """Activation monitoring (fastai's ActivationStats / a TensorBoard logger's shape):
    forward hooks registered on every Linear write `stats[name] = o.abs().mean().item()` and
    count calls in a dict, read after the step."""
    net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    stats = {"calls": 0}

    def make(name):
        def hook(m, i, o):
            stats[name] = o.detach().abs().mean().item()
            stats["calls"] += 1
        return hook
    for name, m in net.named_modules():
        if isinstance(m, nn.Linear):
            m.register_forward_hook(make(name))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    return _plain_step(net, optimizer), [net, optimizer, stats], _xy()


@program()
def prog_old_weight_norm_wavenet(wrap):
    """The deprecated `torch.nn.utils.weight_norm` (weight_g / weight_v, recomputed by a
    forward pre-hook), as WaveGlow/HiFi-GAN checkpoints still use it."""
    from torch.nn.utils import weight_norm
    net = nn.Sequential(weight_norm(nn.Linear(5, 8)), nn.ReLU(), weight_norm(nn.Linear(8, 3)))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)

    return _plain_step(net, optimizer), [net, optimizer], _xy()


@program()
def prog_accum_loop_inside_step(wrap):
    """A whole accumulation window inside one converted call (fairseq's `update_freq`):
    `for i, (x, y) in enumerate(micro)`, `loss / len(micro)`, `if (i + 1) % k == 0` steps,
    `clip_grad_norm_(foreach=True)`."""
    net = mlp()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
    k = 2

    def window(xs, ys):
        total = 0.0
        for i, (x, y) in enumerate(zip(xs, ys)):
            loss = F.cross_entropy(net(x), y) / k
            loss.backward()
            total += loss.item()
            if (i + 1) % k == 0:
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0, foreach=True)
                optimizer.step()
                optimizer.zero_grad()
        return total
    d = _xy(n=12)
    return window, [net, optimizer], [
        (torch.stack([x for x, _ in d[j:j + 4]]), torch.stack([y for _, y in d[j:j + 4]]))
        for j in range(0, 12, 4)]


# ================================================================ the loop changes things between calls
@program()
def prog_add_param_group_between_calls(wrap):
    """Progressive unfreezing as ULMFiT/fastai scripts do it: the head trains alone, then the
    loop calls `optimizer.add_param_group({'params': backbone, 'lr': ...})` and trains on."""
    net = mlp()
    for p in net[0].parameters():
        p.requires_grad_(False)
    optimizer = torch.optim.Adam(net[2].parameters(), lr=1e-2)
    step = _plain_step(net, optimizer)

    def unfreeze(step):
        for p in net[0].parameters():
            p.requires_grad_(True)
        optimizer.add_param_group({"params": list(net[0].parameters()), "lr": 1e-3})
    d = _xy(n=6)
    return step, [net, optimizer], d[:3] + [unfreeze] + d[3:]


@program()
def prog_hparams_changed_between_calls(wrap):
    """Hyper-parameter schedules applied by the loop (a Ray Tune/PBT perturbation): the loop
    sets `weight_decay`, `betas` and `lr` of the param group between calls."""
    net = mlp()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.0)
    step = _plain_step(net, optimizer)

    def perturb(step):
        g = optimizer.param_groups[0]
        g["weight_decay"] = 0.5
        g["betas"] = (0.8, 0.99)
        g["lr"] = 3e-2
    d = _xy(n=6)
    return step, [net, optimizer], d[:3] + [perturb] + d[3:]


@program()
def prog_optimizer_state_reset_between_calls(wrap):
    """Resetting Adam's moments after a restart (some RL/continual-learning code):
    `optimizer.state.clear()` between calls (`state = defaultdict(dict)`)."""
    net = mlp()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    step = _plain_step(net, optimizer)

    def reset(step):
        optimizer.state.clear()
    d = _xy(n=6)
    return step, [net, optimizer], d[:3] + [reset] + d[3:]


@program()
def prog_lightning_toggle_optimizer_gan(wrap):
    """Lightning's manual-optimization GAN: `toggle_optimizer(opt)` sets `requires_grad=False`
    on every parameter the other optimizer owns (remembering the old flags), `untoggle`
    puts them back, inside the step, around each half."""
    G = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 4))
    D = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
    all_params = list(G.parameters()) + list(D.parameters())
    saved = {}

    def toggle_optimizer(opt):
        mine = {id(p) for g in opt.param_groups for p in g["params"]}
        for i, p in enumerate(all_params):
            saved[i] = p.requires_grad
            if id(p) not in mine:
                p.requires_grad = False

    def untoggle_optimizer(opt):
        for i, p in enumerate(all_params):
            p.requires_grad = saved[i]

    def training_step(real):
        z = torch.randn(real.size(0), 3)
        toggle_optimizer(opt_g)
        g_loss = F.softplus(-D(G(z))).mean()
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
        untoggle_optimizer(opt_g)
        toggle_optimizer(opt_d)
        d_loss = F.softplus(-D(real)).mean() + F.softplus(D(G(z).detach())).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        untoggle_optimizer(opt_d)
        return g_loss.detach(), d_loss.detach()
    g = _gen(43)
    return training_step, [G, D, opt_g, opt_d], [(torch.randn(6, 4, generator=g),)
                                                   for _ in range(5)]


@program()
def prog_clip_inf_norm_and_nan_to_num(wrap):
    """Defensive gradient hygiene (seen in RL and speech repos): `p.grad.nan_to_num_()` on
    every parameter, then `clip_grad_norm_(norm_type=inf)`; a batch with a nan input."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        for p in net.parameters():
            if p.grad is not None:
                p.grad.nan_to_num_(nan=0.0, posinf=1.0, neginf=-1.0)
        norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5, norm_type=float("inf"))
        optimizer.step()
        return norm
    return step, [net, optimizer], _bad_batches(6, float("nan"))


@program()
def prog_optimizer_adamw_fused_cpu(wrap):
    """`AdamW(fused=True)` (torchtitan/timm pick it when available) on CPU."""
    net = mlp()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2, fused=True)
    return _plain_step(net, optimizer), [net, optimizer], _xy(n=5)


@program()
def prog_lr_finder(wrap):
    """fastai/pytorch-lr-finder's range test: lr multiplied each step, a smoothed loss
    `avg = beta * avg + (1 - beta) * loss.item()` with bias correction, best loss tracked,
    `if smoothed > 4 * best: stop = True`."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
    st = {"avg": 0.0, "best": float("inf"), "n": 0, "stop": False, "lrs": [], "losses": []}
    beta, mult = 0.9, 3.0

    def step(x, y):
        st["n"] += 1
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        st["avg"] = beta * st["avg"] + (1 - beta) * loss.item()
        smoothed = st["avg"] / (1 - beta ** st["n"])
        if st["n"] > 1 and smoothed > 4 * st["best"]:
            st["stop"] = True
        if smoothed < st["best"] or st["n"] == 1:
            st["best"] = smoothed
        st["losses"].append(smoothed)
        st["lrs"].append(optimizer.param_groups[0]["lr"])
        loss.backward()
        optimizer.step()
        for g in optimizer.param_groups:
            g["lr"] *= mult
        return st["stop"]
    return step, [net, optimizer, st], _xy(n=8)


@program()
def prog_cleanrl_sac_autotune(wrap):
    """CleanRL sac_continuous_action.py: tanh-squashed `Normal.rsample()` actor, twin Q
    critics with a no_grad target using `min(qf1_t, qf2_t) - alpha * log_pi`, automatic
    entropy tuning (`log_alpha` with its own Adam), three optimizers."""
    obs_d, act_d = 3, 2

    class Actor(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(obs_d, 16)
            self.mean, self.logstd = nn.Linear(16, act_d), nn.Linear(16, act_d)

        def get_action(self, x):
            h = F.relu(self.fc(x))
            mean, log_std = self.mean(h), torch.tanh(self.logstd(h))
            log_std = -5 + 0.5 * (2 - (-5)) * (log_std + 1)
            normal = torch.distributions.Normal(mean, log_std.exp())
            x_t = normal.rsample()
            y_t = torch.tanh(x_t)
            log_prob = normal.log_prob(x_t) - torch.log(1 - y_t.pow(2) + 1e-6)
            return y_t, log_prob.sum(1, keepdim=True)

    def q():
        return nn.Sequential(nn.Linear(obs_d + act_d, 16), nn.ReLU(), nn.Linear(16, 1))
    actor, qf1, qf2, qf1_t, qf2_t = Actor(), q(), q(), q(), q()
    qf1_t.load_state_dict(qf1.state_dict())
    qf2_t.load_state_dict(qf2.state_dict())
    q_opt = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=1e-3)
    a_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
    log_alpha = torch.zeros(1, requires_grad=True)
    alpha_opt = torch.optim.Adam([log_alpha], lr=1e-3)
    target_entropy = -float(act_d)
    st = {"alpha": log_alpha.exp().item()}

    def update(obs, actions, rewards, next_obs, dones):
        with torch.no_grad():
            next_a, next_logp = actor.get_action(next_obs)
            qn = torch.min(qf1_t(torch.cat([next_obs, next_a], 1)),
                           qf2_t(torch.cat([next_obs, next_a], 1))) - st["alpha"] * next_logp
            next_q = rewards.flatten() + (1 - dones.flatten()) * 0.99 * qn.view(-1)
        qa = torch.cat([obs, actions], 1)
        qf_loss = F.mse_loss(qf1(qa).view(-1), next_q) + F.mse_loss(qf2(qa).view(-1), next_q)
        q_opt.zero_grad()
        qf_loss.backward()
        q_opt.step()
        pi, log_pi = actor.get_action(obs)
        pa = torch.cat([obs, pi], 1)
        actor_loss = ((st["alpha"] * log_pi) - torch.min(qf1(pa), qf2(pa))).mean()
        a_opt.zero_grad()
        actor_loss.backward()
        a_opt.step()
        with torch.no_grad():
            _, log_pi = actor.get_action(obs)
        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
        alpha_opt.zero_grad()
        alpha_loss.backward()
        alpha_opt.step()
        st["alpha"] = log_alpha.exp().item()
        for param, target_param in zip(qf1.parameters(), qf1_t.parameters()):
            target_param.data.copy_(0.005 * param.data + (1 - 0.005) * target_param.data)
        for param, target_param in zip(qf2.parameters(), qf2_t.parameters()):
            target_param.data.copy_(0.005 * param.data + (1 - 0.005) * target_param.data)
        return qf_loss.item(), actor_loss.item(), alpha_loss.item()
    g = _gen(47)
    batches = [(torch.randn(5, obs_d, generator=g), torch.rand(5, act_d, generator=g) * 2 - 1,
                torch.randn(5, generator=g), torch.randn(5, obs_d, generator=g),
                (torch.rand(5, generator=g) < 0.2).float()) for _ in range(5)]
    return update, [actor, qf1, qf2, qf1_t, qf2_t, q_opt, a_opt, alpha_opt, log_alpha, st], \
        batches


@program()
def prog_byol_predictor_ema_target(wrap):
    """BYOL (lucidrains/byol-pytorch's shape): online encoder + projector + predictor, a
    target network updated by EMA under no_grad, symmetric `2 - 2 * cos` loss on two random
    augmentations (`x + 0.1 * randn_like`, a random flip mask)."""
    online = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 4))
    predictor = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    target = copy.deepcopy(online)
    for p in target.parameters():
        p.requires_grad = False
    optimizer = torch.optim.Adam(list(online.parameters()) + list(predictor.parameters()),
                                 lr=1e-2)

    def augment(x):
        flip = torch.rand(x.size(0), 1) < 0.5
        return torch.where(flip, x.flip(-1), x) + 0.1 * torch.randn_like(x)

    def loss_fn(p, z):
        p, z = F.normalize(p, dim=-1), F.normalize(z, dim=-1)
        return 2 - 2 * (p * z).sum(dim=-1)

    def step(x, _):
        v1, v2 = augment(x), augment(x)
        p1, p2 = predictor(online(v1)), predictor(online(v2))
        with torch.no_grad():
            z1, z2 = target(v1), target(v2)
        loss = (loss_fn(p1, z2.detach()) + loss_fn(p2, z1.detach())).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for po, pt in zip(online.parameters(), target.parameters()):
                pt.data = pt.data * 0.99 + po.data * 0.01
        return loss.item()
    return step, [online, predictor, target, optimizer], _xy()


@program()
def prog_weighted_smoothed_ce(wrap):
    """Class-imbalance recipe: `nn.CrossEntropyLoss(weight=class_weights,
    label_smoothing=0.1, ignore_index=-100)` with weights from inverse class frequency
    computed in the step by `torch.bincount(minlength=)`."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        valid = y[y != -100]
        counts = torch.bincount(valid, minlength=3).float()
        weights = counts.sum() / (3 * counts.clamp(min=1))
        crit = nn.CrossEntropyLoss(weight=weights, label_smoothing=0.1, ignore_index=-100)
        loss = crit(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach(), weights
    return step, [net, optimizer], _ignored_batches()


# ================================================================ more hooks and Functions
@program()
def prog_hook_registered_inside_step(wrap):
    """Feature extraction the way forum answers and torchvision's old IntermediateLayerGetter
    users write it inside the step: `h = layer.register_forward_hook(save)`, forward,
    `h.remove()`; a feature-matching loss on the saved activation."""
    net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        acts = []
        handle = net[1].register_forward_hook(lambda m, i, o: acts.append(o))
        out = net(x)
        handle.remove()
        loss = F.cross_entropy(out, y) + 1e-2 * acts[0].pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach(), len(net[1]._forward_hooks)
    return step, [net, optimizer], _xy()


@program()
def prog_forward_hook_with_kwargs_modifies_output(wrap):
    """A forward hook registered with `with_kwargs=True` that returns a modified output
    (activation scaling for a pruning/steering experiment)."""
    net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))

    def hook(module, args, kwargs, output):
        return output * 0.5 + 0.1
    net[0].register_forward_hook(hook, with_kwargs=True)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    return _plain_step(net, optimizer), [net, optimizer], _xy()


class ScaledTanh(torch.autograd.Function):
    """A new-style Function: `forward` without ctx, `setup_context`, ctx attributes."""

    @staticmethod
    def forward(x, scale):
        return torch.tanh(x) * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale = inputs
        ctx.scale = scale
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * (ctx.scale - out * out / ctx.scale), None


@program()
def prog_custom_function_setup_context(wrap):
    """The torch>=2.0 Function style (`setup_context`, ctx attributes), used by xformers-like
    kernels' Python fallbacks."""
    net = nn.Sequential(nn.Linear(5, 8), nn.Linear(8, 3))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net[1](ScaledTanh.apply(net[0](x), 1.7)), y)
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step, [net, optimizer], _xy()


@program()
def prog_orthogonal_parametrization(wrap):
    """`parametrizations.orthogonal` on a recurrent-style square weight (expRNN/orthogonal
    RNN scripts)."""
    from torch.nn.utils import parametrizations
    net = nn.Sequential(nn.Linear(5, 6), nn.Tanh(),
                        parametrizations.orthogonal(nn.Linear(6, 6)), nn.Tanh(), nn.Linear(6, 3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    return _plain_step(net, optimizer), [net, optimizer], _xy(n=5)


@program()
def prog_fork_rng_augment(wrap):
    """Reproducible augmentation with `torch.random.fork_rng()` + `manual_seed(epoch_seed)`
    inside the step (noise that is the same every call, the global stream untouched), then a
    dropout forward drawing from the global stream."""
    net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(7)
            x = x + 0.1 * torch.randn_like(x)
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step, [net, optimizer], _xy()



class RouterWithStats(nn.Module):
    """A mixture-of-experts router keeping load statistics in a dict attribute (the shape of
    fairseq/Megatron MoE logging): `self.stats['calls'] += 1`, `self.stats['load'] =
    ...item()` in forward."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(5, 2)
        self.experts = nn.ModuleList(nn.Linear(5, 3) for _ in range(2))
        self.stats = {"calls": 0, "load": 0.0}

    def forward(self, x):
        w = F.softmax(self.gate(x), dim=-1)
        self.stats["calls"] += 1
        self.stats["load"] = w[:, 0].mean().item()
        return w[:, :1] * self.experts[0](x) + w[:, 1:] * self.experts[1](x)


def _router(wrap):
    net = RouterWithStats()
    model = wrap(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    return _plain_step(model, optimizer), [net, optimizer], _xy()


@program()
def prog_moe_router_dict_stats(wrap):
    """MoE router statistics in a module's dict attribute, whole step converted."""
    return _router(wrap)


@program("model")
def prog_moe_router_dict_stats_model(wrap):
    """The router `to_graph`-converted in an eager step."""
    return _router(wrap)



@program()
def prog_head_swap_new_optimizer_between_calls(wrap):
    """Fine-tuning on a new label set (the torchvision finetuning tutorial's
    `model.fc = nn.Linear(num_ftrs, num_classes)`): after 3 steps the loop replaces the head
    with a fresh 4-class Linear and builds a new optimizer the step reaches through a dict."""
    net = mlp()
    holder = {"opt": torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)}

    def step(x, y):
        opt = holder["opt"]
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    def swap(step):
        net[2] = nn.Linear(8, 4)
        holder["opt"] = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    d = _xy(n=6)
    d4 = [(x, (y + 1) % 4) for x, y in _xy(n=3, k=4, seed=9)]
    return step, [net, holder], d[:3] + [swap] + d4


@program()
def prog_model_double_between_calls(wrap):
    """Switching to float64 for a gradient check (`model.double()` and double inputs) after
    a few float32 steps, the optimizer kept."""
    net = mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    step = _plain_step(net, optimizer)

    def to_double(step):
        net.double()
    d = _xy(n=6)
    return step, [net, optimizer], d[:3] + [to_double] + [(x.double(), y) for x, y in d[3:]]


# ----------------------------------------------------------------------------- verdicts
def _bug(reason):
    return pytest.mark.xfail(strict=True, reason=reason)


def _needless(reason):
    """A clean fallback (eager's results, naming this file's line) that should convert."""
    return pytest.mark.xfail(strict=True, raises=NeedlessFallback,
                             reason="needless fallback: " + reason)


VERDICTS = {
    # Python randomness: a graph would freeze one draw
    "prog_dqn_epsilon_greedy_python_random": "fallback",
    # a torch.Generator the mixer owns (made before the call): documented refusal
    "prog_timm_mixup_cutmix_seeded_generator": "fallback",
    # scheduler.step(epoch) with an argument: documented refusal
    "prog_cosine_warm_restarts_fractional_epoch": "fallback",
    # toggle_optimizer's first call creates the keys of its `saved` dict (a side effect);
    # with the keys there, later calls convert
    "prog_lightning_toggle_optimizer_gan": "fallback_once",
    # (fixed by h90: tests/training/test_step_needless_fallbacks3.py)
    "prog_reinforce_returns_deque": "convert",
    "prog_cleanrl_ppo_update_epochs": "convert",
    "prog_lightning_training_step_method_converted": "convert",
    "prog_accum_tensor_condition": "convert",
    "prog_center_loss_two_optimizers": "convert",
    "prog_moe_router_dict_stats": "convert",
    "prog_moe_router_dict_stats_model": "convert",
    # (fixed by h86: hooks' Python state, tests/training/test_hook_python_state.py)
    "prog_forward_pre_hook_input_scaling": "convert",
    "prog_activation_stats_forward_hooks": "convert",
}


# Steps that trace more than twice, on purpose.
MAX_TRACES = {
    # the loop index is a Python int argument: specialized, one graph per value (README)
    "prog_accum_index_argument": 7,
    # get_batch's views differ in storage offset: see test_wlm_get_batch_views_share_a_graph
    "prog_wlm_transformer_manual_sgd": 5,
    # batch_idx is a Python int argument (unused, but specialized as any): one graph per value
    "prog_lightning_training_step_method_converted": 5,
}


@pytest.fixture(autouse=True)
def _grad_mode_back():
    yield
    torch.set_grad_enabled(True)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=VERDICTS[n][1]) if isinstance(VERDICTS.get(n), tuple) else n
    for n in _PROGRAMS])
def test_program(name):
    verdict = VERDICTS.get(name, "convert")
    expect = verdict[0] if isinstance(verdict, tuple) else verdict
    check(name, expect)


def test_enough_programs():
    assert len(_PROGRAMS) >= 40


def test_wlm_get_batch_views_share_a_graph():
    # (fixed: the storage offset is in no call key, transpiler/argument_offsets.py)
    lin = nn.Linear(3, 1)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = lin(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()
    f = to_graph(step)
    data = torch.randn(40, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(0, 40, 4):
            f(data[i:i + 4])
    assert f.cache_info().traces <= 2, f.cache_info()
