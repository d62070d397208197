"""Programs written as other projects write them, for ``test_fresh_eyes_programs2.py``.

Each ``p_*`` function builds one program from the current seed and returns a
``Program``: the callable a new user hands to ``to_graph`` (a function, a training step
closing over its model and optimizer, or an ``nn.Module``), a list of argument tuples
(other values, sizes and types per call), and ``state()``: what the program leaves behind
that the caller can see (parameters, gradients, buffers, optimizer lr, Python lists and
counters). Every program is written from memory after a named public source (the
PyTorch examples, d2l.ai, nanoGPT/minGPT/makemore, torchvision references, lucidrains,
Hugging Face custom loops); none is copied. Sizes are tiny so each runs in well under a
second.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import math
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from e2e_helpers import assert_same
from test_fidelity_adversarial2 import x_masked_softmax_d2l as masked_softmax
from test_fidelity_adversarial2 import x_sequence_mask as sequence_mask
from transpiler import FallbackWarning, to_graph

THIS_FILE = __file__.rsplit("/", 1)[-1]


@dataclass
class Program:
    fn: Callable
    inputs: list
    state: Callable = lambda: None


# ----------------------------------------------------------------------------- runner
def _call(fn, args, seed):
    """Run ``fn`` on ``args`` (already the call's own copies) from ``seed``: its result (or
    exception), printed text, FallbackWarnings and the global RNG state afterwards."""
    torch.manual_seed(seed)
    text = io.StringIO()
    with warnings.catch_warnings(record=True) as rec, contextlib.redirect_stdout(text):
        warnings.simplefilter("always")
        try:
            out = fn(*args)
        except Exception as e:  # noqa: BLE001 - compared with eager's exception
            out = e
    fallbacks = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    return out, text.getvalue(), fallbacks, torch.get_rng_state()


def _identity(out, args):
    """Which argument (by position) each top-level output is, as eager answers ``is``."""
    outs = out if isinstance(out, tuple) else (out,)
    return [next((i for i, a in enumerate(args) if o is a), None) if isinstance(o, torch.Tensor) else None
            for o in outs]


def run(build, *, strict=False):
    """Build the program from seed 0 and run it eagerly on every input; build it again from
    seed 0 and run it through ``to_graph`` on the same inputs, seeded alike (eager first, so
    a program's module-level state is reset by its second build). After each call compare
    the results, what the call printed, its arguments (in-place writes and their ``.grad``),
    the global RNG state, which outputs are the arguments themselves, and ``state()``.
    Returns the FallbackWarning messages of the converted run."""
    torch.manual_seed(0)
    eager = build()
    expected = []
    for i, args in enumerate(eager.inputs):
        e_args = _clone_args(args)
        exp, e_text, _, e_rng = _call(eager.fn, e_args, 100 + i)
        expected.append((exp, e_text, e_args, e_rng, _identity(exp, e_args), _snapshot(eager.state())))
    torch.manual_seed(0)
    conv = build()
    g = to_graph(conv.fn, strict=strict)
    fallbacks = []
    for i, (args, (exp, e_text, e_args, e_rng, e_ident, e_state)) in enumerate(zip(conv.inputs, expected)):
        c_args = _clone_args(args)
        got, c_text, fb, c_rng = _call(g, c_args, 100 + i)
        fallbacks += fb
        if isinstance(exp, Exception):
            assert isinstance(got, type(exp)), f"call {i}: eager raised {exp!r}, got {got!r}"
            continue
        if isinstance(got, Exception):
            raise AssertionError(f"call {i}: eager returned, converted raised {got!r}") from got
        same(got, exp, f"call {i} out")
        assert c_text == e_text, f"call {i}: printed {c_text!r}, eager printed {e_text!r}"
        same(c_args, e_args, f"call {i} args")
        assert torch.equal(c_rng, e_rng), f"call {i}: global RNG state differs from eager's after the call"
        assert _identity(got, c_args) == e_ident, f"call {i}: outputs that are arguments differ"
        same(conv.state(), e_state, f"call {i} state")
    return fallbacks


def _snapshot(v):
    """A copy of eager's state as it is now (tensors cloned, containers rebuilt)."""
    if isinstance(v, torch.Tensor):
        c = v.detach().clone().requires_grad_(v.requires_grad)
        if v.grad is not None:
            c.grad = v.grad.clone()
        return c
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        return type(v)(*(_snapshot(x) for x in v))
    if isinstance(v, (list, tuple)):
        return type(v)(_snapshot(x) for x in v)
    if isinstance(v, dict):
        return {k: _snapshot(x) for k, x in v.items()}
    return v


def _clone_args(args):
    """Each call's own copies of the arguments (leaves that require grad stay leaves, with
    a copy of their ``.grad``)."""
    def one(v):
        if isinstance(v, torch.Tensor):
            c = v.detach().clone().requires_grad_(v.requires_grad)
            if v.is_leaf and v.grad is not None:
                c.grad = v.grad.clone()
            return c
        if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
            return type(v)(one(x) for x in v)
        if isinstance(v, dict):
            return {k: one(x) for k, x in v.items()}
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return dataclasses.replace(v, **{f.name: one(getattr(v, f.name)) for f in dataclasses.fields(v)})
        return v
    return tuple(one(a) for a in args)


def same(got, exp, path="out"):
    """``assert_same`` that also walks dataclasses (field by field, exact class)."""
    if dataclasses.is_dataclass(exp) and not isinstance(exp, type):
        assert type(got) is type(exp), f"{path}: {type(got).__name__} != {type(exp).__name__}"
        for f in dataclasses.fields(exp):
            same(getattr(got, f.name), getattr(exp, f.name), f"{path}.{f.name}")
        return
    if isinstance(exp, (list, tuple, dict)):
        assert type(got) is type(exp), f"{path}: container {type(got).__name__} != {type(exp).__name__}"
        assert len(got) == len(exp), f"{path}: length {len(got)} != {len(exp)}"
        if isinstance(exp, dict):
            assert list(got) == list(exp), f"{path}: keys {list(got)} != {list(exp)}"
            for k in exp:
                same(got[k], exp[k], f"{path}[{k!r}]")
        else:
            for i, (a, b) in enumerate(zip(got, exp)):
                same(a, b, f"{path}[{i}]")
        return
    if isinstance(got, torch.Tensor) and not isinstance(exp, torch.Tensor):
        assert type(got) is torch.Tensor, f"{path}: a {type(got).__name__} where eager has {exp!r}"
    if isinstance(exp, torch.Tensor) and isinstance(got, torch.Tensor):
        assert type(got) is type(exp), f"{path}: a {type(got).__name__} where eager has a {type(exp).__name__}"
        assert got.requires_grad == exp.requires_grad, \
            f"{path}: requires_grad {got.requires_grad} != {exp.requires_grad}"
        if exp.is_leaf and exp.requires_grad:
            same(got.grad, exp.grad, f"{path}.grad")
    if isinstance(exp, np.ndarray):
        assert isinstance(got, np.ndarray), f"{path}: expected ndarray, got {type(got).__name__}"
        assert got.dtype == exp.dtype and got.shape == exp.shape, f"{path}: {got.dtype}{got.shape} != {exp.dtype}{exp.shape}"
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5, err_msg=path)
        return
    if isinstance(exp, float) and isinstance(got, float) and math.isinf(exp):
        assert got == exp, f"{path}: {got} != {exp}"
        return
    if isinstance(exp, float) and math.isnan(exp):  # a float nan, or a 0-d float tensor's
        assert isinstance(got, float) or (isinstance(got, torch.Tensor) and got.dim() == 0
                                          and got.is_floating_point()), f"{path}: {got!r} != nan"
        assert math.isnan(float(got)), f"{path}: {got!r} != nan"
        return
    assert_same(got, exp, path)


def params_of(*modules, grads=True):
    out = {}
    for k, m in enumerate(modules):
        for name, p in m.named_parameters():
            out[f"{k}.{name}"] = p.detach().clone()
            if grads and p.grad is not None:
                out[f"{k}.{name}.grad"] = p.grad.detach().clone()
        for name, b in m.named_buffers():
            out[f"{k}.{name}"] = b.detach().clone()
    return out


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ============================================================================ programs
# --- pytorch/examples mnist/main.py: Net + train step (SGD, nll_loss, dropout) --------
class MnistNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(8 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def p_mnist_train_step():
    model = MnistNet()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)

    def train_step(data, target, log_interval):
        model.train()
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if log_interval:
            return loss.item()
        return loss

    g = gen(1)
    inputs = [(torch.randn(4, 1, 12, 12, generator=g), torch.randint(0, 10, (4,), generator=g), k % 2 == 0)
              for k in range(3)]
    return Program(train_step, inputs,
                   lambda: dict(params_of(model), lr=optimizer.param_groups[0]["lr"]))


def p_mnist_test_loop():
    model = MnistNet()

    def test(batches):
        model.eval()
        test_loss = 0
        correct = 0
        with torch.no_grad():
            for data, target in batches:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum().item()
        n = sum(len(t) for _, t in batches)
        test_loss /= n
        return test_loss, correct, 100.0 * correct / n

    g = gen(2)
    inputs = [([(torch.randn(3, 1, 12, 12, generator=g), torch.randint(0, 10, (3,), generator=g))
                for _ in range(nb)],) for nb in (1, 2, 3)]
    return Program(test, inputs)


# --- pytorch/examples time_sequence_prediction: LSTMCell loop + future ----------------
class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 6)
        self.lstm2 = nn.LSTMCell(6, 6)
        self.linear = nn.Linear(6, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), 6, dtype=input.dtype)
        c_t = torch.zeros(input.size(0), 6, dtype=input.dtype)
        h_t2 = torch.zeros(input.size(0), 6, dtype=input.dtype)
        c_t2 = torch.zeros(input.size(0), 6, dtype=input.dtype)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):  # if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


def p_time_sequence_prediction():
    seq = Sequence()
    g = gen(4)
    inputs = [(torch.randn(3, 7, generator=g), 0), (torch.randn(3, 7, generator=g), 4),
              (torch.randn(2, 9, generator=g), 2), (torch.randn(2, 6, generator=g, dtype=torch.float64), 1)]
    return Program(seq, inputs)


# --- pytorch/examples reinforcement_learning/reinforce.py: finish_episode ---------------
class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 16)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(16, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


def p_reinforce_finish_episode():
    policy = Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    eps = 1e-6
    gamma = 0.99

    def finish_episode(states, actions, rewards):
        # select_action's log-probs, recomputed for the episode, then finish_episode
        probs = policy(states)
        m = torch.distributions.Categorical(probs)
        log_probs = m.log_prob(actions)
        R = 0
        policy_loss = []
        returns = []
        for r in rewards[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = torch.stack(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        return policy_loss.item()

    g = gen(7)
    inputs = []
    for n in (5, 5, 7):
        inputs.append((torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g),
                       [float(v) for v in torch.rand(n, generator=g)]))
    return Program(finish_episode, inputs, lambda: params_of(policy))


def p_discounted_returns_tensor():
    """The same returns computed over a reward *tensor* (CleanRL-style), with dones."""
    def returns_of(rewards, dones, gamma: float = 0.99):
        returns = torch.zeros_like(rewards)
        running = torch.zeros(())
        for t in reversed(range(rewards.shape[0])):
            if dones[t]:
                running = torch.zeros(())
            running = rewards[t] + gamma * running
            returns[t] = running
        return returns

    g = gen(8)
    inputs = [(torch.rand(n, generator=g), torch.rand(n, generator=g) < 0.3) for n in (6, 6, 9)]
    return Program(returns_of, inputs)


# --- d2l.ai 9.5 RNN from scratch: rnn(), grad_clipping() --------------------------------
def p_d2l_rnn_scratch_train_step():
    num_inputs, num_hiddens, vocab = 6, 8, 6

    def normal(shape):
        return torch.randn(size=shape) * 0.1

    params = [normal((num_inputs, num_hiddens)), normal((num_hiddens, num_hiddens)),
              torch.zeros(num_hiddens), normal((num_hiddens, vocab)), torch.zeros(vocab)]
    for p in params:
        p.requires_grad_(True)

    def rnn(inputs, state, params):
        W_xh, W_hh, b_h, W_hq, b_q = params
        H, = state
        outputs = []
        for X in inputs:
            H = torch.tanh(torch.matmul(X, W_xh) + torch.matmul(H, W_hh) + b_h)
            Y = torch.matmul(H, W_hq) + b_q
            outputs.append(Y)
        return torch.cat(outputs, dim=0), (H,)

    def grad_clipping(params, theta):
        norm = torch.sqrt(sum(torch.sum((p.grad ** 2)) for p in params))
        if norm > theta:
            for param in params:
                param.grad[:] *= theta / norm

    def sgd(params, lr, batch_size):
        with torch.no_grad():
            for param in params:
                param -= lr * param.grad / batch_size
                param.grad.zero_()

    def train_step(X, Y, theta):
        state = (torch.zeros((X.shape[0], num_hiddens)),)
        y_hat, state = rnn(F.one_hot(X.T, vocab).type(torch.float32), state, params)
        l = F.cross_entropy(y_hat, Y.T.reshape(-1))
        l.backward()
        grad_clipping(params, theta)
        sgd(params, lr=1.0, batch_size=1)
        return l

    g = gen(9)
    inputs = [(torch.randint(0, vocab, (2, 4), generator=g), torch.randint(0, vocab, (2, 4), generator=g), th)
              for th in (0.05, 100.0, 0.05)]
    return Program(train_step, inputs, lambda: [p.detach().clone() for p in params])


# --- d2l.ai 11.3 attention scoring (its sequence_mask / masked_softmax: test_fidelity_adversarial2)
class AdditiveAttention(nn.Module):
    def __init__(self, num_hiddens, dropout=0.0):
        super().__init__()
        self.W_k = nn.LazyLinear(num_hiddens, bias=False)
        self.W_q = nn.LazyLinear(num_hiddens, bias=False)
        self.w_v = nn.LazyLinear(1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens):
        queries, keys = self.W_q(queries), self.W_k(keys)
        features = queries.unsqueeze(2) + keys.unsqueeze(1)
        features = torch.tanh(features)
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


def p_d2l_additive_attention():
    att = AdditiveAttention(8)
    att(torch.zeros(1, 1, 5), torch.zeros(1, 3, 4), torch.zeros(1, 3, 6), None)  # materialize
    g = gen(10)
    inputs = [(torch.randn(2, 1, 5, generator=g), torch.ones(2, 10, 4), torch.randn(2, 10, 6, generator=g),
               torch.tensor([2, 6])),
              (torch.randn(2, 1, 5, generator=g), torch.randn(2, 10, 4, generator=g),
               torch.randn(2, 10, 6, generator=g), torch.tensor([3, 7])),
              (torch.randn(2, 1, 5, generator=g), torch.randn(2, 10, 4, generator=g),
               torch.randn(2, 10, 6, generator=g), None)]
    return Program(att, inputs, lambda: att.attention_weights.detach().clone())


# --- d2l.ai / PyTorch seq2seq tutorial: GRU encoder-decoder, teacher forcing, greedy ----
SOS_token, EOS_token = 0, 1


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)

    def forward(self, input):
        embedded = self.embedding(input)
        output, hidden = self.gru(embedded)
        return output, hidden


class DecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, max_length=4):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.max_length = max_length

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        for i in range(self.max_length):
            decoder_output, decoder_hidden = self.forward_step(decoder_input, decoder_hidden)
            decoder_outputs.append(decoder_output)
            if target_tensor is not None:
                # Teacher forcing: Feed the target as the next input
                decoder_input = target_tensor[:, i].unsqueeze(1)
            else:
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()
        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
        return decoder_outputs, decoder_hidden, None

    def forward_step(self, input, hidden):
        output = self.embedding(input)
        output = F.relu(output)
        output, hidden = self.gru(output, hidden)
        output = self.out(output)
        return output, hidden


def p_seq2seq_teacher_forcing_train():
    encoder, decoder = EncoderRNN(9, 8), DecoderRNN(8, 9)
    enc_opt = torch.optim.Adam(encoder.parameters(), lr=1e-2)
    dec_opt = torch.optim.Adam(decoder.parameters(), lr=1e-2)
    criterion = nn.NLLLoss()

    def train_epoch(batches):
        total_loss = 0
        for input_tensor, target_tensor in batches:
            enc_opt.zero_grad()
            dec_opt.zero_grad()
            encoder_outputs, encoder_hidden = encoder(input_tensor)
            decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor)
            loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
            loss.backward()
            enc_opt.step()
            dec_opt.step()
            total_loss += loss.item()
        return total_loss / len(batches)

    g = gen(11)
    inputs = [([(torch.randint(2, 9, (2, 4), generator=g), torch.randint(0, 9, (2, 4), generator=g))
                for _ in range(nb)],) for nb in (1, 2, 1)]
    return Program(train_epoch, inputs, lambda: params_of(encoder, decoder))


def p_seq2seq_greedy_evaluate():
    """The tutorial's evaluate(): decode one sentence, stop at EOS (``.item()`` test)."""
    encoder, decoder = EncoderRNN(9, 8), DecoderRNN(8, 9)
    # make EOS likely for some inputs
    with torch.no_grad():
        decoder.out.bias[EOS_token] += 0.6

    def evaluate(input_tensor, max_length: int = 6):
        with torch.no_grad():
            encoder_outputs, encoder_hidden = encoder(input_tensor)
            decoder_input = torch.tensor([[SOS_token]])
            decoder_hidden = encoder_hidden
            decoded_ids = []
            for di in range(max_length):
                decoder_output, decoder_hidden = decoder.forward_step(decoder_input, decoder_hidden)
                topv, topi = decoder_output.data.topk(1)
                if topi.item() == EOS_token:
                    decoded_ids.append(EOS_token)
                    break
                decoded_ids.append(topi.item())
                decoder_input = topi.squeeze(-1).detach()
        return decoded_ids

    g = gen(12)
    inputs = [(torch.randint(2, 9, (1, n), generator=g),) for n in (3, 4, 5, 3, 6)]
    return Program(evaluate, inputs)


# --- sklearn/Keras-style early stopping inside a fit loop --------------------------------
def p_early_stopping_fit():
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def fit(x, y, xv, yv, max_epochs: int = 12, patience: int = 2):
        best = float("inf")
        bad_epochs = 0
        history = []
        best_state = None
        for epoch in range(max_epochs):
            model.train()
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                val_loss = F.mse_loss(model(xv), yv)
            history.append(val_loss.item())
            if val_loss < best:
                best = val_loss.item()
                bad_epochs = 0
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
            else:
                bad_epochs += 1
                if bad_epochs >= patience:
                    break
        return best, epoch, history, best_state

    return Program(fit, _fit_inputs(13, 8, 3), lambda: params_of(model))


def _fit_inputs(seed, n, spread, calls=3):
    """(x, y, x_val, y_val) per call; the validation inputs spread more on later calls, so
    the validation loss rises and the patience runs out on some calls."""
    g = gen(seed)
    inputs = []
    for k in range(calls):
        x = torch.randn(n, 3, generator=g)
        inputs.append((x, x.sum(1, keepdim=True), torch.randn(4, 3, generator=g) * (1 + spread * (k % 3)),
                       torch.randn(4, 1, generator=g)))
    return inputs


# --- timm-style: clip + cosine warmup scheduler + EMA of weights ---------------------------
class ModelEma:
    def __init__(self, model, decay=0.9):
        self.ema = copy.deepcopy(model)
        self.ema.eval()
        self.decay = decay
        for p in self.ema.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        for ema_v, model_v in zip(self.ema.state_dict().values(), model.state_dict().values()):
            ema_v.copy_(ema_v * self.decay + (1.0 - self.decay) * model_v)


def p_ema_clip_cosine_step():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    ema = ModelEma(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
    warmup, total = 2, 10

    def lr_lambda(step):
        if step < warmup:
            return float(step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)

    def step(x, y):
        model.train()
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        sched.step()
        ema.update(model)
        return loss.detach(), grad_norm

    g = gen(14)
    inputs = [(torch.randn(6, 4, generator=g) * (1 + k), torch.randint(0, 3, (6,), generator=g)) for k in range(4)]
    return Program(step, inputs, lambda: dict(params_of(model, ema.ema), lr=sched.get_last_lr()[0]))


# --- CPU bfloat16 autocast train step ----------------------------------------------------
def p_autocast_bf16_step():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(x, y):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return logits.dtype, loss

    g = gen(15)
    inputs = [(torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(3)]
    return Program(step, inputs, lambda: params_of(model))


# --- mixup / cutmix (timm Mixup-style, torch randomness) ----------------------------------
def p_mixup_cutmix_batch():
    def rand_bbox(size, lam):
        W, H = size[2], size[3]
        cut_rat = math.sqrt(1.0 - lam)
        cut_w, cut_h = int(W * cut_rat), int(H * cut_rat)
        cx = int(torch.randint(W, (1,)).item())
        cy = int(torch.randint(H, (1,)).item())
        bbx1 = min(max(cx - cut_w // 2, 0), W)
        bby1 = min(max(cy - cut_h // 2, 0), H)
        bbx2 = min(max(cx + cut_w // 2, 0), W)
        bby2 = min(max(cy + cut_h // 2, 0), H)
        return bbx1, bby1, bbx2, bby2

    def mix(x, y, num_classes: int = 5, cutmix_prob: float = 0.5):
        lam = torch.distributions.Beta(torch.tensor(1.0), torch.tensor(1.0)).sample().item()
        index = torch.randperm(x.size(0))
        y1 = F.one_hot(y, num_classes).float()
        if torch.rand(1).item() < cutmix_prob:
            bbx1, bby1, bbx2, bby2 = rand_bbox(x.size(), lam)
            x = x.clone()
            x[:, :, bbx1:bbx2, bby1:bby2] = x[index, :, bbx1:bbx2, bby1:bby2]
            lam = 1 - ((bbx2 - bbx1) * (bby2 - bby1) / (x.size(-1) * x.size(-2)))
        else:
            x = lam * x + (1 - lam) * x[index]
        return x, lam * y1 + (1 - lam) * y1[index], lam

    g = gen(16)
    inputs = [(torch.randn(4, 2, 6, 6, generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(5)]
    return Program(mix, inputs)


# --- focal loss and label smoothing, by hand ----------------------------------------------
class FocalLoss(nn.Module):
    def __init__(self, alpha=0.25, gamma=2.0, reduction="mean"):
        super().__init__()
        self.alpha, self.gamma, self.reduction = alpha, gamma, reduction

    def forward(self, inputs, targets):
        p = torch.sigmoid(inputs)
        ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = ce_loss * ((1 - p_t) ** self.gamma)
        if self.alpha >= 0:
            alpha_t = self.alpha * targets + (1 - self.alpha) * (1 - targets)
            loss = alpha_t * loss
        if self.reduction == "none":
            pass
        elif self.reduction == "mean":
            loss = loss.mean()
        elif self.reduction == "sum":
            loss = loss.sum()
        else:
            raise ValueError(f"Invalid Value for arg 'reduction': '{self.reduction}'")
        return loss


class LabelSmoothingLoss(nn.Module):
    def __init__(self, classes, smoothing=0.1, dim=-1, ignore_index=-100):
        super().__init__()
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.cls = classes
        self.dim = dim
        self.ignore_index = ignore_index

    def forward(self, pred, target):
        pred = pred.log_softmax(dim=self.dim)
        keep = target != self.ignore_index
        pred, target = pred[keep], target[keep]
        with torch.no_grad():
            true_dist = torch.zeros_like(pred)
            true_dist.fill_(self.smoothing / (self.cls - 1))
            true_dist.scatter_(1, target.data.unsqueeze(1), self.confidence)
        return torch.mean(torch.sum(-true_dist * pred, dim=self.dim))


def p_focal_and_smoothing_losses():
    focal = FocalLoss()
    ls = LabelSmoothingLoss(5)
    head = nn.Linear(4, 5)

    def losses(x, t_multi, t_cls):
        logits = head(x)
        l1 = focal(logits, t_multi)
        l2 = ls(logits, t_cls)
        total = l1 + l2
        total.backward()
        return {"focal": l1, "smooth": l2}

    g = gen(17)
    inputs = [(torch.randn(n, 4, generator=g), (torch.rand(n, 5, generator=g) > 0.5).float(),
               torch.tensor([0, -100, 3, 4, 1, -100, 2][:n])) for n in (4, 4, 7)]
    return Program(losses, inputs, lambda: params_of(head))


# --- SimCLR NT-Xent, with torch.eye masks --------------------------------------------------
def p_nt_xent():
    proj = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))

    def nt_xent(x_i, x_j, temperature: float = 0.5):
        z_i = F.normalize(proj(x_i), dim=1)
        z_j = F.normalize(proj(x_j), dim=1)
        batch_size = z_i.shape[0]
        z = torch.cat((z_i, z_j), dim=0)
        sim = F.cosine_similarity(z.unsqueeze(1), z.unsqueeze(0), dim=2) / temperature
        sim_i_j = torch.diag(sim, batch_size)
        sim_j_i = torch.diag(sim, -batch_size)
        positive = torch.cat((sim_i_j, sim_j_i), dim=0).reshape(2 * batch_size, 1)
        mask = torch.ones((2 * batch_size, 2 * batch_size), dtype=bool)
        mask = mask.fill_diagonal_(0)
        for i in range(batch_size):
            mask[i, batch_size + i] = 0
            mask[batch_size + i, i] = 0
        negative = sim[mask].reshape(2 * batch_size, -1)
        labels = torch.zeros(2 * batch_size).to(positive.device).long()
        logits = torch.cat((positive, negative), dim=1)
        loss = F.cross_entropy(logits, labels, reduction="sum") / (2 * batch_size)
        loss.backward()
        return loss

    g = gen(18)
    inputs = [(torch.randn(b, 6, generator=g), torch.randn(b, 6, generator=g)) for b in (3, 3, 4)]
    return Program(nt_xent, inputs, lambda: params_of(proj))


# --- Gumbel-softmax with straight-through hard sample, by hand ----------------------------
def p_gumbel_softmax():
    def gumbel_softmax(logits, tau: float = 1.0, hard: bool = False, dim: int = -1):
        gumbels = -torch.empty_like(logits).exponential_().log()
        gumbels = (logits + gumbels) / tau
        y_soft = gumbels.softmax(dim)
        if hard:
            index = y_soft.max(dim, keepdim=True)[1]
            y_hard = torch.zeros_like(logits).scatter_(dim, index, 1.0)
            ret = y_hard - y_soft.detach() + y_soft
        else:
            ret = y_soft
        return ret

    w = torch.randn(5, requires_grad=True)

    def f(x, hard):
        y = gumbel_softmax(x * w, tau=0.5, hard=hard)
        (y * torch.arange(5.0)).sum().backward()
        return y

    g = gen(19)
    inputs = [(torch.randn(3, 5, generator=g), h) for h in (True, False, True)]
    return Program(f, inputs, lambda: (w.detach().clone(), w.grad.clone()))


# --- beam search over a toy LM, tensors only (batched beams, early stop) ------------------
def p_beam_search():
    lm = nn.Sequential(nn.Embedding(7, 8), nn.Linear(8, 7))
    eos = 6

    def beam_search(start, beam_size: int = 3, max_len: int = 6):
        seqs = start.view(1, 1)
        scores = torch.zeros(1)
        finished = torch.zeros(1, dtype=torch.bool)
        for step in range(max_len):
            logp = F.log_softmax(lm(seqs[:, -1]), dim=-1)
            logp = torch.where(finished[:, None], torch.full_like(logp, -1e9), logp)
            logp[:, eos] = torch.where(finished, torch.zeros_like(scores), logp[:, eos])
            cand = (scores[:, None] + logp).view(-1)
            top_scores, top_idx = cand.topk(min(beam_size, cand.numel()))
            beam_idx = top_idx // logp.size(-1)
            tok = top_idx % logp.size(-1)
            seqs = torch.cat([seqs[beam_idx], tok[:, None]], dim=1)
            scores = top_scores
            finished = finished[beam_idx] | (tok == eos)
            if finished.all():
                break
        best = scores.argmax()
        return seqs[best], scores[best]

    inputs = [(torch.tensor(k),) for k in (0, 3, 5)]
    return Program(beam_search, inputs)


# --- top-k / top-p (nucleus) filtering, HF-style, then sampling ---------------------------
def top_k_top_p_filtering(logits, top_k=0, top_p=1.0, filter_value=-float("Inf"), min_tokens_to_keep=1):
    if top_k > 0:
        top_k = min(max(top_k, min_tokens_to_keep), logits.size(-1))
        indices_to_remove = logits < torch.topk(logits, top_k)[0][..., -1, None]
        logits[indices_to_remove] = filter_value
    if top_p < 1.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_indices_to_remove = cumulative_probs > top_p
        if min_tokens_to_keep > 1:
            sorted_indices_to_remove[..., :min_tokens_to_keep] = 0
        sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
        sorted_indices_to_remove[..., 0] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        logits[indices_to_remove] = filter_value
    return logits


def p_top_k_top_p_sampling():
    lm = nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 11))

    @torch.no_grad()
    def sample(idx, steps: int, top_k: int, top_p: float, temperature: float = 0.8):
        for _ in range(steps):
            logits = lm(idx[:, -1]) / temperature
            logits = top_k_top_p_filtering(logits, top_k=top_k, top_p=top_p)
            probs = F.softmax(logits, dim=-1)
            next_token = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, next_token), dim=1)
        return idx

    inputs = [(torch.tensor([[1], [2]]), 4, 5, 0.9), (torch.tensor([[3], [4]]), 4, 5, 0.9),
              (torch.tensor([[3], [4], [5]]), 3, 0, 0.7)]
    return Program(sample, inputs)


# --- CTC greedy decoding (collapse repeats, drop blanks) ----------------------------------
def p_ctc_greedy_decode():
    def greedy_decode(log_probs, blank: int = 0):
        best = log_probs.argmax(-1)  # (T, B)
        results = []
        for b in range(best.size(1)):
            prev = blank
            out = []
            for t in range(best.size(0)):
                p = best[t, b].item()
                if p != prev and p != blank:
                    out.append(p)
                prev = p
            results.append(out)
        return results

    g = gen(20)
    inputs = [(torch.randn(8, 2, 4, generator=g).log_softmax(-1),) for _ in range(3)]
    return Program(greedy_decode, inputs)


def p_ctc_greedy_decode_tensor():
    """The same with tensor ops: unique_consecutive-style collapse, per-row lengths."""
    def greedy_decode(log_probs, blank: int = 0):
        best = log_probs.argmax(-1).T  # (B, T)
        keep = torch.ones_like(best, dtype=torch.bool)
        keep[:, 1:] = best[:, 1:] != best[:, :-1]
        keep &= best != blank
        lengths = keep.sum(1)
        out = torch.full_like(best, -1)
        for b in range(best.size(0)):
            toks = best[b][keep[b]]
            out[b, :toks.numel()] = toks
        return out, lengths

    g = gen(21)
    inputs = [(torch.randn(8, 2, 4, generator=g).log_softmax(-1),) for _ in range(3)]
    return Program(greedy_decode, inputs)


# --- non-maximum suppression by hand (the classic while-order loop) -----------------------
def _boxes(n, g):
    xy = torch.rand(n, 2, generator=g) * 4
    return torch.cat([xy, xy + 1 + torch.rand(n, 2, generator=g) * 2], 1)


def p_nms_by_hand():
    def nms(boxes, scores, thresh: float = 0.4):
        x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
        areas = (x2 - x1) * (y2 - y1)
        order = scores.argsort(descending=True)
        keep = []
        while order.numel() > 0:
            i, rest = order[0], order[1:]
            keep.append(i)
            if rest.numel() == 0:
                break
            w = (torch.minimum(x2[i], x2[rest]) - torch.maximum(x1[i], x1[rest])).clamp(min=0)
            h = (torch.minimum(y2[i], y2[rest]) - torch.maximum(y1[i], y1[rest])).clamp(min=0)
            inter = w * h
            iou = inter / (areas[i] + areas[rest] - inter)
            order = rest[iou <= thresh]
        return torch.stack(keep)

    g = gen(22)
    inputs = [(_boxes(n, g), torch.rand(n, generator=g)) for n in (6, 6, 9)]
    return Program(nms, inputs)


def p_nms_matrix_keep_mask():
    """NMS as a fixed-length for over the sorted boxes with a keep mask (no data-dependent
    shapes inside the loop)."""
    def nms(boxes, scores, thresh: float = 0.4):
        order = scores.argsort(descending=True)
        b = boxes[order]
        lt = torch.max(b[:, None, :2], b[None, :, :2])
        rb = torch.min(b[:, None, 2:], b[None, :, 2:])
        inter = (rb - lt).clamp(min=0).prod(-1)
        area = (b[:, 2:] - b[:, :2]).prod(-1)
        iou = inter / (area[:, None] + area[None, :] - inter)
        keep = torch.ones(b.size(0), dtype=torch.bool)
        for i in range(b.size(0)):
            if keep[i]:
                suppress = iou[i] > thresh
                suppress[: i + 1] = False
                keep = keep & ~suppress
        return order[keep]

    g = gen(23)
    inputs = [(_boxes(n, g), torch.rand(n, generator=g)) for n in (6, 6, 9)]
    return Program(nms, inputs)


# --- k-means by hand with an empty-cluster test and convergence break ---------------------
def p_kmeans():
    def kmeans(x, k: int = 3, iters: int = 20, tol: float = 1e-4):
        centroids = x[:k].clone()
        for it in range(iters):
            dists = torch.cdist(x, centroids)
            labels = dists.argmin(dim=1)
            new_centroids = centroids.clone()
            for j in range(k):
                mask = labels == j
                if mask.any():
                    new_centroids[j] = x[mask].mean(dim=0)
            shift = (new_centroids - centroids).norm()
            centroids = new_centroids
            if shift < tol:
                break
        return centroids, labels, it

    g = gen(24)
    inputs = [(torch.randn(12, 2, generator=g) + torch.tensor([4.0, 0.0]) * (torch.arange(12) % 3)[:, None],)
              for _ in range(3)]
    inputs.append((torch.zeros(5, 2).index_fill_(0, torch.tensor([4]), 1.0),))  # an empty cluster
    return Program(kmeans, inputs)


# --- Viterbi decoding of a linear-chain CRF (pytorch tutorial BiLSTM-CRF) ----------------
class CRF(nn.Module):
    def __init__(self, num_tags=4):
        super().__init__()
        self.transitions = nn.Parameter(torch.randn(num_tags, num_tags))
        self.start = nn.Parameter(torch.randn(num_tags))
        self.end = nn.Parameter(torch.randn(num_tags))

    def forward(self, feats):
        """Viterbi: returns (score, best path as a Python list of ints)."""
        backpointers = []
        forward_var = self.start + feats[0]
        for feat in feats[1:]:
            next_tag_var = forward_var.unsqueeze(1) + self.transitions  # [from, to]
            viterbivars_t, bptrs_t = next_tag_var.max(dim=0)
            backpointers.append(bptrs_t)
            forward_var = viterbivars_t + feat
        terminal_var = forward_var + self.end
        best_tag_id = int(terminal_var.argmax())
        path_score = terminal_var[best_tag_id]
        best_path = [best_tag_id]
        for bptrs_t in reversed(backpointers):
            best_tag_id = bptrs_t[best_tag_id].item()
            best_path.append(best_tag_id)
        best_path.reverse()
        return path_score, best_path


def p_viterbi_crf():
    crf = CRF()
    g = gen(25)
    inputs = [(torch.randn(n, 4, generator=g),) for n in (5, 5, 7)]
    return Program(crf, inputs)


def p_crf_forward_algorithm_nll():
    """The CRF's log partition (forward algorithm) with logsumexp; NLL and gradients."""
    crf = CRF()

    def nll(feats, tags):
        alpha = crf.start + feats[0]
        for t in range(1, feats.size(0)):
            alpha = torch.logsumexp(alpha.unsqueeze(1) + crf.transitions + feats[t].unsqueeze(0), dim=0)
        log_z = torch.logsumexp(alpha + crf.end, dim=0)
        score = crf.start[tags[0]] + feats[0, tags[0]]
        for t in range(1, feats.size(0)):
            score = score + crf.transitions[tags[t - 1], tags[t]] + feats[t, tags[t]]
        score = score + crf.end[tags[-1]]
        loss = log_z - score
        loss.backward()
        return loss

    g = gen(26)
    inputs = [(torch.randn(n, 4, generator=g), torch.randint(0, 4, (n,), generator=g)) for n in (5, 5, 6)]
    return Program(nll, inputs, lambda: params_of(crf))


# --- Dijkstra and BFS over an adjacency-matrix tensor -------------------------------------
def p_dijkstra():
    def dijkstra(adj, source: int = 0):
        n = adj.size(0)
        dist = torch.full((n,), float("inf"))
        dist[source] = 0.0
        visited = torch.zeros(n, dtype=torch.bool)
        for _ in range(n):
            masked = torch.where(visited, torch.full_like(dist, float("inf")), dist)
            u = masked.argmin()
            if torch.isinf(masked[u]):
                break
            visited[u] = True
            for v in range(n):
                w = adj[u, v]
                if w > 0 and dist[u] + w < dist[v]:
                    dist[v] = dist[u] + w
        return dist

    def graph(n, g):
        a = torch.rand(n, n, generator=g) * (torch.rand(n, n, generator=g) < 0.4)
        return a

    g = gen(27)
    inputs = [(graph(n, g),) for n in (5, 5, 6)]
    return Program(dijkstra, inputs)


def p_bfs_levels():
    def bfs(adj, start: int = 0):
        n = adj.size(0)
        level = torch.full((n,), -1, dtype=torch.long)
        level[start] = 0
        frontier = torch.zeros(n, dtype=torch.bool)
        frontier[start] = True
        depth = 0
        while frontier.any():
            depth += 1
            reach = (adj[frontier].sum(0) > 0) & (level < 0)
            level[reach] = depth
            frontier = reach
        return level, depth

    g = gen(28)
    inputs = [((torch.rand(n, n, generator=g) < 0.3).float(),) for n in (6, 6, 8)]
    return Program(bfs, inputs)


def p_bfs_python_queue():
    """BFS with a Python deque and ``.tolist()`` neighbours (the textbook spelling)."""
    import collections

    def bfs(adj, start: int = 0):
        n = adj.size(0)
        visited = [False] * n
        order = []
        queue = collections.deque([start])
        visited[start] = True
        while queue:
            u = queue.popleft()
            order.append(u)
            for v in torch.nonzero(adj[u]).flatten().tolist():
                if not visited[v]:
                    visited[v] = True
                    queue.append(v)
        return order

    g = gen(29)
    inputs = [((torch.rand(n, n, generator=g) < 0.3).float(),) for n in (6, 6, 8)]
    return Program(bfs, inputs)


# --- torchvision references train_one_epoch (warmup, metric logger, isfinite) -------------
class SmoothedValue:
    def __init__(self):
        self.total = 0.0
        self.count = 0

    def update(self, value, n=1):
        self.count += n
        self.total += value * n

    @property
    def global_avg(self):
        return self.total / self.count


def p_torchvision_train_one_epoch():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5))
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=3)
    meters = {"loss": SmoothedValue(), "acc1": SmoothedValue()}

    def accuracy(output, target, topk=(1,)):
        with torch.no_grad():
            maxk = max(topk)
            batch_size = target.size(0)
            _, pred = output.topk(maxk, 1, True, True)
            pred = pred.t()
            correct = pred.eq(target[None])
            res = []
            for k in topk:
                correct_k = correct[:k].flatten().sum(dtype=torch.float32)
                res.append(correct_k * (100.0 / batch_size))
            return res

    def train_one_epoch(batches):
        model.train()
        for image, target in batches:
            output = model(image)
            loss = criterion(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            warmup.step()
            acc1, acc3 = accuracy(output, target, topk=(1, 3))
            batch_size = image.shape[0]
            meters["loss"].update(loss.item(), n=batch_size)
            meters["acc1"].update(acc1.item(), n=batch_size)
        return meters["loss"].global_avg, meters["acc1"].global_avg

    g = gen(30)
    inputs = [([(torch.randn(3, 3, 5, 5, generator=g), torch.randint(0, 5, (3,), generator=g))
                for _ in range(2)],) for _ in range(3)]
    return Program(train_one_epoch, inputs,
                   lambda: dict(params_of(model), lr=optimizer.param_groups[0]["lr"],
                                n=meters["loss"].count, tot=meters["loss"].total))


# --- Hugging Face-style custom loop: model(**batch) -> ModelOutput-like dataclass, accum --
@dataclass
class SequenceClassifierOutput:
    loss: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None
    hidden_states: Optional[tuple] = None


class TinyClassifier(nn.Module):
    def __init__(self, vocab=13, dim=8, num_labels=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([nn.Linear(dim, dim) for _ in range(2)])
        self.classifier = nn.Linear(dim, num_labels)
        self.num_labels = num_labels

    def forward(self, input_ids, attention_mask=None, labels=None, output_hidden_states=False):
        h = self.embed(input_ids)
        all_hidden = () if output_hidden_states else None
        for layer in self.layers:
            if output_hidden_states:
                all_hidden = all_hidden + (h,)
            h = h + torch.tanh(layer(h))
        if attention_mask is not None:
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1)
        else:
            pooled = h.mean(1)
        logits = self.classifier(pooled)
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(), labels.squeeze())
            else:
                loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=all_hidden)


def p_hf_custom_loop_accumulation():
    model = TinyClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    sched = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.0, total_iters=10)
    gradient_accumulation_steps = 2
    progress = {"completed_steps": 0, "losses": []}

    def train(batches):
        model.train()
        for step, batch in enumerate(batches):
            outputs = model(**batch)
            loss = outputs.loss
            loss = loss / gradient_accumulation_steps
            loss.backward()
            if step % gradient_accumulation_steps == 0 or step == len(batches) - 1:
                optimizer.step()
                sched.step()
                optimizer.zero_grad()
                progress["completed_steps"] += 1
        return outputs

    g = gen(31)

    def batch(b, t):
        ids = torch.randint(0, 13, (b, t), generator=g)
        mask = torch.ones(b, t, dtype=torch.long)
        mask[0, t // 2:] = 0
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, 3, (b,), generator=g)}

    inputs = [([batch(2, 5), batch(2, 5), batch(2, 5)],), ([batch(3, 4), batch(3, 4)],),
              ([batch(2, 6)],)]
    return Program(train, inputs, lambda: dict(params_of(model), n=progress["completed_steps"],
                                               lr=optimizer.param_groups[0]["lr"]))


def p_hf_eval_hidden_states():
    model = TinyClassifier()
    model.eval()

    def predict(input_ids, attention_mask, output_hidden_states):
        with torch.no_grad():
            out = model(input_ids, attention_mask=attention_mask, output_hidden_states=output_hidden_states)
        preds = out.logits.argmax(-1)
        return out, preds

    g = gen(32)
    inputs = [(torch.randint(0, 13, (2, 5), generator=g), torch.ones(2, 5, dtype=torch.long), True),
              (torch.randint(0, 13, (2, 5), generator=g), None, False),
              (torch.randint(0, 13, (3, 7), generator=g), torch.ones(3, 7, dtype=torch.long), True)]
    return Program(predict, inputs)


# --- a module with buffers updated in forward (BatchNorm by hand, d2l 8.5) ----------------
class MyBatchNorm(nn.Module):
    def __init__(self, num_features, momentum=0.1, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(num_features))
        self.beta = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("moving_mean", torch.zeros(num_features))
        self.register_buffer("moving_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.momentum, self.eps = momentum, eps

    def forward(self, X):
        if not torch.is_grad_enabled() or not self.training:
            X_hat = (X - self.moving_mean) / torch.sqrt(self.moving_var + self.eps)
        else:
            mean = X.mean(dim=0)
            var = ((X - mean) ** 2).mean(dim=0)
            X_hat = (X - mean) / torch.sqrt(var + self.eps)
            with torch.no_grad():
                self.moving_mean.mul_(1 - self.momentum).add_(self.momentum * mean)
                self.moving_var.mul_(1 - self.momentum).add_(self.momentum * var)
                self.num_batches_tracked += 1
        return self.gamma * X_hat + self.beta


def p_batchnorm_by_hand_buffers():
    bn = MyBatchNorm(3)

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = bn

        def forward(self, x, train):
            self.bn.train(train)
            return self.bn(x)

    w = Wrapper()

    def step(x, train: bool):
        y = w(x, train)
        return y

    g = gen(33)
    inputs = [(torch.randn(4, 3, generator=g), True), (torch.randn(4, 3, generator=g), True),
              (torch.randn(5, 3, generator=g), False), (torch.randn(4, 3, generator=g), True)]
    return Program(step, inputs, lambda: params_of(bn))


def p_batchnorm_by_hand_module():
    bn = MyBatchNorm(3)
    g = gen(34)
    inputs = [(torch.randn(4, 3, generator=g),), (torch.randn(4, 3, generator=g),),
              (torch.randn(6, 3, generator=g),)]
    return Program(bn, inputs, lambda: params_of(bn))


# --- lucidrains-style: exists/default helpers, RMSNorm, rotary, GEGLU, PreNorm residual ---
def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.normalize(x, dim=-1) * self.scale * self.gamma


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, theta=10000):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, seq_len):
        t = torch.arange(seq_len, dtype=self.inv_freq.dtype)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(pos, t):
    return t * pos.cos() + rotate_half(t) * pos.sin()


class GEGLU(nn.Module):
    def forward(self, x):
        x, gate = x.chunk(2, dim=-1)
        return F.gelu(gate) * x


class Attention(nn.Module):
    def __init__(self, dim, heads=2, dim_head=4, causal=False):
        super().__init__()
        inner = heads * dim_head
        self.heads, self.scale, self.causal = heads, dim_head ** -0.5, causal
        self.norm = RMSNorm(dim)
        self.to_qkv = nn.Linear(dim, inner * 3, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)
        self.rotary = RotaryEmbedding(dim_head)

    def forward(self, x, mask=None, context_mask=None):
        b, n, _ = x.shape
        h = self.heads
        x = self.norm(x)
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, h, -1).transpose(1, 2) for t in (q, k, v))
        pos = self.rotary(n)
        q, k = apply_rotary_pos_emb(pos, q), apply_rotary_pos_emb(pos, k)
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.scale
        mask_value = -torch.finfo(sim.dtype).max
        if exists(mask):
            sim = sim.masked_fill(~mask[:, None, None, :], mask_value)
        if self.causal:
            i, j = sim.shape[-2:]
            causal_mask = torch.ones((i, j), dtype=torch.bool).triu(j - i + 1)
            sim = sim.masked_fill(causal_mask, mask_value)
        attn = sim.softmax(dim=-1)
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        out = out.transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


class Transformer(nn.Module):
    def __init__(self, dim=8, depth=2, causal=False, ff_mult=2):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Attention(dim, causal=causal),
                nn.Sequential(RMSNorm(dim), nn.Linear(dim, dim * ff_mult * 2), GEGLU(),
                              nn.Linear(dim * ff_mult, dim)),
            ]))
        self.final_norm = RMSNorm(dim)

    def forward(self, x, mask=None, return_hiddens=False):
        hiddens = []
        for attn, ff in self.layers:
            x = attn(x, mask=mask) + x
            x = ff(x) + x
            hiddens.append(x)
        out = self.final_norm(x)
        if not return_hiddens:
            return out
        return out, hiddens


def p_lucidrains_transformer():
    model = Transformer(causal=True)
    g = gen(35)
    inputs = [(torch.randn(2, 5, 8, generator=g),),
              (torch.randn(2, 5, 8, generator=g), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])),
              (torch.randn(1, 7, 8, generator=g), None, True)]
    return Program(model, inputs)


def p_lucidrains_transformer_grads():
    model = Transformer(depth=1, causal=False)

    def loss_fn(x, mask):
        out = model(x, mask=mask)
        loss = out.pow(2).mean()
        loss.backward()
        return loss

    g = gen(36)
    inputs = [(torch.randn(2, 5, 8, generator=g), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])),
              (torch.randn(2, 5, 8, generator=g), None),
              (torch.randn(2, 6, 8, generator=g), torch.ones(2, 6, dtype=torch.bool))]
    return Program(loss_fn, inputs, lambda: params_of(model))


# --- minGPT CausalSelfAttention with a "bias" buffer, and makemore sampling -----------------
class MinGPTAttention(nn.Module):
    def __init__(self, n_embd=8, n_head=2, block_size=8):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class TinyLM(nn.Module):
    def __init__(self, vocab=9, n_embd=8, block_size=8):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.attn = MinGPTAttention(n_embd, 2, block_size)
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        x = x + self.attn(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

def p_makemore_sample_until_dot():
    """makemore's sampling of one name: ``.item()`` of a draw, Python context list, stop at 0."""
    model = TinyLM()
    model.eval()
    itos = {i: c for i, c in enumerate(".abcdefgh")}

    @torch.no_grad()
    def sample_name(seed: int, max_len: int = 10):
        gg = torch.Generator().manual_seed(seed)
        context = [0]
        out = []
        while True:
            idx = torch.tensor([context[-model.block_size:]])
            logits, _ = model(idx)
            probs = F.softmax(logits[:, -1, :], dim=-1)
            ix = torch.multinomial(probs, num_samples=1, generator=gg).item()
            context.append(ix)
            if ix == 0 or len(out) >= max_len:
                break
            out.append(ix)
        return "".join(itos[i] for i in out)

    inputs = [(s,) for s in (1, 2, 3)]
    return Program(sample_name, inputs)


def p_nanogpt_train_step_with_lr_schedule():
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    warmup_iters, lr_decay_iters, learning_rate, min_lr = 2, 6, 6e-3, 6e-4
    state = {"iter_num": 0, "best_val_loss": 1e9}

    def get_lr(it):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return min_lr + coeff * (learning_rate - min_lr)

    def step(X, Y, grad_clip: float = 1.0):
        lr = get_lr(state["iter_num"])
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        logits, loss = model(X, Y)
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item()
        if lossf < state["best_val_loss"]:
            state["best_val_loss"] = lossf
        state["iter_num"] += 1
        return lossf, lr

    g = gen(37)
    inputs = [(torch.randint(0, 9, (2, 6), generator=g), torch.randint(0, 9, (2, 6), generator=g)) for _ in range(5)]
    return Program(step, inputs, lambda: dict(params_of(model), **state))


# --- siamese contrastive / triplet loss with a margin -------------------------------------
def p_contrastive_triplet():
    emb = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))

    def contrastive(x1, x2, same, margin: float = 1.0):
        d = F.pairwise_distance(emb(x1), emb(x2))
        loss = (same * d.pow(2) + (1 - same) * F.relu(margin - d).pow(2)).mean()
        anchor, pos, neg = emb(x1), emb(x2), emb(x2.flip(0))
        trip = F.triplet_margin_loss(anchor, pos, neg, margin=margin)
        total = loss + trip
        total.backward()
        return total, d

    g = gen(38)
    inputs = [(torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g),
               (torch.rand(4, generator=g) > 0.5).float()) for _ in range(3)]
    return Program(contrastive, inputs, lambda: params_of(emb))


# --- a data-dependent while: Newton / power iteration until converged -----------------------
def p_power_iteration():
    def top_eigen(A, tol: float = 1e-6, max_iter: int = 200):
        v = torch.ones(A.size(0)) / math.sqrt(A.size(0))
        lam = torch.tensor(0.0)
        it = 0
        while it < max_iter:
            w = A @ v
            new_lam = v @ w
            v = w / w.norm()
            it += 1
            if (new_lam - lam).abs() < tol:
                lam = new_lam
                break
            lam = new_lam
        return lam, v, it

    g = gen(39)
    inputs = []
    for n in (3, 3, 4):
        m = torch.randn(n, n, generator=g)
        inputs.append((m @ m.T + torch.eye(n),))
    return Program(top_eigen, inputs)


# --- an LSTM cell from scratch with a dataclass state, over a variable-length batch -------
@dataclass
class LSTMState:
    h: torch.Tensor
    c: torch.Tensor
    steps: int = 0


class ScratchLSTM(nn.Module):
    def __init__(self, n_in=3, n_h=5):
        super().__init__()
        self.W = nn.Linear(n_in + n_h, 4 * n_h)
        self.n_h = n_h

    def forward(self, xs, lengths, state: Optional[LSTMState] = None):
        B, T, _ = xs.shape
        if state is None:
            state = LSTMState(torch.zeros(B, self.n_h), torch.zeros(B, self.n_h))
        h, c = state.h, state.c
        outs = []
        for t in range(T):
            gates = self.W(torch.cat([xs[:, t], h], dim=-1))
            i, f, g, o = gates.chunk(4, dim=-1)
            c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h_new = torch.sigmoid(o) * torch.tanh(c_new)
            alive = (t < lengths).unsqueeze(-1)
            h = torch.where(alive, h_new, h)
            c = torch.where(alive, c_new, c)
            outs.append(h)
        return torch.stack(outs, 1), LSTMState(h, c, state.steps + T)


def p_scratch_lstm_dataclass_state():
    model = ScratchLSTM()
    g = gen(40)
    s0 = LSTMState(torch.randn(2, 5, generator=g), torch.randn(2, 5, generator=g), 3)
    inputs = [(torch.randn(2, 4, 3, generator=g), torch.tensor([4, 2])),
              (torch.randn(2, 4, 3, generator=g), torch.tensor([1, 3]), s0),
              (torch.randn(3, 6, 3, generator=g), torch.tensor([6, 2, 5]))]
    return Program(model, inputs)


# --- REINFORCE policy with a running reward kept on an object, epsilon-greedy in torch ----
def p_dqn_epsilon_greedy_and_td_step():
    """DQN (pytorch tutorial style): epsilon-greedy from torch.rand, target net, Huber TD loss,
    soft update of the target net under no_grad."""
    policy_net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    target_net = copy.deepcopy(policy_net)
    optimizer = torch.optim.AdamW(policy_net.parameters(), lr=1e-3, amsgrad=True)
    steps = {"done": 0}
    EPS_START, EPS_END, EPS_DECAY, GAMMA, TAU = 0.9, 0.05, 3, 0.99, 0.05

    def select_action(state):
        sample = torch.rand(()).item()
        eps_threshold = EPS_END + (EPS_START - EPS_END) * math.exp(-1.0 * steps["done"] / EPS_DECAY)
        steps["done"] += 1
        if sample > eps_threshold:
            with torch.no_grad():
                return policy_net(state).max(1).indices.view(1, 1)
        else:
            return torch.randint(0, 2, (1, 1))

    def optimize(state, action, reward, next_state, non_final):
        a = select_action(state[:1])
        state_action_values = policy_net(state).gather(1, action)
        next_state_values = torch.zeros(state.size(0))
        with torch.no_grad():
            next_state_values[non_final] = target_net(next_state[non_final]).max(1).values
        expected = (next_state_values * GAMMA) + reward
        loss = nn.SmoothL1Loss()(state_action_values, expected.unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
        optimizer.step()
        target_sd = target_net.state_dict()
        policy_sd = policy_net.state_dict()
        for key in policy_sd:
            target_sd[key] = policy_sd[key] * TAU + target_sd[key] * (1 - TAU)
        target_net.load_state_dict(target_sd)
        return a, loss.item()

    g = gen(41)
    inputs = []
    for _ in range(4):
        inputs.append((torch.randn(5, 4, generator=g), torch.randint(0, 2, (5, 1), generator=g),
                       torch.rand(5, generator=g), torch.randn(5, 4, generator=g),
                       torch.tensor([True, True, False, True, False])))
    return Program(optimize, inputs, lambda: dict(params_of(policy_net, target_net), **steps))


# --- Python containers: a dict of per-class counts and a list of losses ---------------------
def p_per_class_metrics_dict():
    def per_class(pred, target, num_classes: int = 3):
        stats = {}
        for c in range(num_classes):
            tp = ((pred == c) & (target == c)).sum()
            fp = ((pred == c) & (target != c)).sum()
            fn = ((pred != c) & (target == c)).sum()
            precision = tp / (tp + fp) if (tp + fp) > 0 else torch.tensor(0.0)
            recall = tp / (tp + fn) if (tp + fn) > 0 else torch.tensor(0.0)
            f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else torch.tensor(0.0)
            stats[f"class_{c}"] = {"p": precision, "r": recall, "f1": f1}
        macro = sum(v["f1"] for v in stats.values()) / num_classes
        return stats, macro

    g = gen(42)
    inputs = [(torch.randint(0, 3, (10,), generator=g), torch.randint(0, 3, (10,), generator=g)),
              (torch.zeros(6, dtype=torch.long), torch.randint(0, 3, (6,), generator=g)),
              (torch.randint(0, 3, (8,), generator=g), torch.randint(0, 3, (8,), generator=g))]
    return Program(per_class, inputs)


def p_running_loss_list_in_closure():
    """A script-style loop keeping a Python list of losses and an epoch counter."""
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    counters = {"epoch": 0}

    def epoch(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        counters["epoch"] += 1
        return sum(losses) / len(losses)

    g = gen(43)
    inputs = [(torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)) for _ in range(3)]
    return Program(epoch, inputs, lambda: dict(params_of(model), losses=list(losses), **counters))


# --- super-resolution-style PixelShuffle + a PSNR loop with a float metric -----------------
def p_psnr_eval():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Tanh(), nn.Conv2d(4, 4, 3, padding=1), nn.PixelShuffle(2))

    def evaluate(batches):
        avg_psnr = 0
        with torch.no_grad():
            for inp, target in batches:
                prediction = net(inp)
                mse = F.mse_loss(prediction, target)
                psnr = 10 * math.log10(1 / mse.item())
                avg_psnr += psnr
        return avg_psnr / len(batches)

    g = gen(44)
    inputs = [([(torch.rand(1, 1, 4, 4, generator=g), torch.rand(1, 1, 8, 8, generator=g)) for _ in range(n)],)
              for n in (1, 2, 2)]
    return Program(evaluate, inputs)


# --- an anchor-free decode: threshold, topk of a data-dependent count ----------------------
def p_score_threshold_topk():
    def decode(scores, boxes, thresh: float = 0.5, max_det: int = 4):
        keep = scores > thresh
        s, b = scores[keep], boxes[keep]
        k = min(max_det, s.numel())
        if k == 0:
            return torch.zeros(0, 4), torch.zeros(0)
        top, idx = s.topk(k)
        return b[idx], top

    g = gen(45)
    inputs = [(torch.rand(8, generator=g), torch.rand(8, 4, generator=g)),
              (torch.rand(8, generator=g) * 0.4, torch.rand(8, 4, generator=g)),
              (torch.rand(10, generator=g), torch.rand(10, 4, generator=g))]
    return Program(decode, inputs)


# --- early stopping without train/eval switches (a closure model in a tensor-broken loop) --
def p_early_stopping_no_mode_switch():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def fit(x, y, xv, yv, max_epochs: int = 10, patience: int = 2):
        best = float("inf")
        wait = 0
        for epoch in range(max_epochs):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
            with torch.no_grad():
                val = F.mse_loss(model(xv), yv)
            if val < best:
                best = val
                wait = 0
            else:
                wait += 1
                if wait >= patience:
                    break
        return best, epoch

    return Program(fit, _fit_inputs(50, 6, 4), lambda: params_of(model))


# --- d2l.ai 10.7 seq2seq: MaskedSoftmaxCELoss (sets self.reduction in forward) -----------
class MaskedSoftmaxCELoss(nn.CrossEntropyLoss):
    """The softmax cross-entropy loss with masks."""

    def forward(self, pred, label, valid_len):
        weights = torch.ones_like(label)
        weights = sequence_mask(weights, valid_len)
        self.reduction = "none"
        unweighted_loss = super(MaskedSoftmaxCELoss, self).forward(pred.permute(0, 2, 1), label)
        weighted_loss = (unweighted_loss * weights).mean(dim=1)
        return weighted_loss


def p_d2l_masked_softmax_ce_loss():
    loss = MaskedSoftmaxCELoss()
    g = gen(52)
    inputs = [(torch.randn(3, 4, 10, generator=g), torch.randint(0, 10, (3, 4), generator=g), torch.tensor([4, 2, 0])),
              (torch.randn(3, 4, 10, generator=g), torch.randint(0, 10, (3, 4), generator=g), torch.tensor([1, 2, 3])),
              (torch.randn(2, 5, 10, generator=g), torch.randint(0, 10, (2, 5), generator=g), torch.tensor([5, 1]))]
    return Program(loss, inputs)


# --- d2l.ai train_epoch_ch8: Accumulator (a list of floats) and Timer-free perplexity ----
class Accumulator:
    """For accumulating sums over `n` variables."""

    def __init__(self, n):
        self.data = [0.0] * n

    def add(self, *args):
        self.data = [a + float(b) for a, b in zip(self.data, args)]

    def __getitem__(self, idx):
        return self.data[idx]


def p_d2l_train_epoch_accumulator():
    net = nn.Sequential(nn.Embedding(7, 6), nn.Linear(6, 7))
    updater = torch.optim.SGD(net.parameters(), lr=0.5)
    loss = nn.CrossEntropyLoss()

    def train_epoch(batches):
        metric = Accumulator(2)
        for X, Y in batches:
            y = Y.T.reshape(-1)
            y_hat = net(X.T.reshape(-1))
            l = loss(y_hat, y.long()).mean()
            updater.zero_grad()
            l.backward()
            updater.step()
            metric.add(l * y.numel(), y.numel())
        return math.exp(metric[0] / metric[1])

    g = gen(53)
    inputs = [([(torch.randint(0, 7, (2, 3), generator=g), torch.randint(0, 7, (2, 3), generator=g))
                for _ in range(n)],) for n in (2, 2, 1)]
    return Program(train_epoch, inputs, lambda: params_of(net))


# --- PyTorch char_rnn_classification tutorial: categoryFromOutput returns a str ----------
class CharRNN(nn.Module):
    def __init__(self, input_size=5, hidden_size=6, output_size=3):
        super().__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, input, hidden):
        combined = torch.cat((input, hidden), 1)
        hidden = torch.tanh(self.i2h(combined))
        output = self.softmax(self.h2o(hidden))
        return output, hidden

    def initHidden(self):
        return torch.zeros(1, self.hidden_size)


def p_char_rnn_classify():
    rnn = CharRNN()
    all_categories = ["English", "French", "Greek"]

    def categoryFromOutput(output):
        top_n, top_i = output.topk(1)
        category_i = top_i[0].item()
        return all_categories[category_i], category_i

    def evaluate(line_tensor):
        hidden = rnn.initHidden()
        for i in range(line_tensor.size()[0]):
            output, hidden = rnn(line_tensor[i], hidden)
        return categoryFromOutput(output)

    g = gen(54)
    inputs = [(F.one_hot(torch.randint(0, 5, (n,), generator=g), 5).float().unsqueeze(1),) for n in (3, 4, 3, 5)]
    return Program(evaluate, inputs)


# --- perceptron learning algorithm: epochs until no mistakes (in-place weight updates) ----
def p_perceptron():
    def perceptron(X, y, max_epochs: int = 20):
        w = torch.zeros(X.size(1))
        b = torch.zeros(())
        for epoch in range(max_epochs):
            errors = 0
            for xi, yi in zip(X, y):
                if yi * (w @ xi + b) <= 0:
                    w += yi * xi
                    b += yi
                    errors += 1
            if errors == 0:
                break
        return w, b, epoch

    g = gen(55)
    inputs = []
    for n in (6, 6, 8):
        X = torch.randn(n, 2, generator=g)
        inputs.append((X, torch.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1.0, -1.0)))
    return Program(perceptron, inputs)


# --- conjugate gradient with a tolerance (a classic solver loop) -------------------------
def p_conjugate_gradient():
    def cg(A, b, tol: float = 1e-8, maxiter: int = 50):
        x = torch.zeros_like(b)
        r = b - A @ x
        p = r.clone()
        rsold = r @ r
        i = 0
        while rsold.sqrt() > tol and i < maxiter:
            Ap = A @ p
            alpha = rsold / (p @ Ap)
            x = x + alpha * p
            r = r - alpha * Ap
            rsnew = r @ r
            p = r + (rsnew / rsold) * p
            rsold = rsnew
            i += 1
        return x, i

    g = gen(56)
    inputs = []
    for n, dt in ((3, torch.float64), (3, torch.float64), (5, torch.float32)):
        m = torch.randn(n, n, generator=g, dtype=dt)
        inputs.append((m @ m.T + n * torch.eye(n, dtype=dt), torch.randn(n, generator=g, dtype=dt)))
    return Program(cg, inputs)


# --- Euclid's gcd and a binary search, on integer tensors ---------------------------------
def p_gcd_and_binary_search():
    def gcd(a, b):
        while b != 0:
            a, b = b, a % b
        return a

    def search(xs, target):
        lo, hi = 0, xs.numel() - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if xs[mid] == target:
                return mid
            elif xs[mid] < target:
                lo = mid + 1
            else:
                hi = mid - 1
        return -1

    def f(a, b, xs, target):
        return gcd(a, b), search(xs, target)

    xs = torch.tensor([1, 3, 4, 8, 11, 15, 20])
    inputs = [(torch.tensor(48), torch.tensor(18), xs, torch.tensor(11)),
              (torch.tensor(17), torch.tensor(5), xs, torch.tensor(5)),
              (torch.tensor(100), torch.tensor(75), xs, torch.tensor(1))]
    return Program(f, inputs)


# --- Levenshtein distance by dynamic programming over token tensors ----------------------
def p_edit_distance():
    def levenshtein(a, b):
        n, m = a.numel(), b.numel()
        dp = torch.zeros(n + 1, m + 1, dtype=torch.long)
        dp[:, 0] = torch.arange(n + 1)
        dp[0, :] = torch.arange(m + 1)
        for i in range(1, n + 1):
            for j in range(1, m + 1):
                if a[i - 1] == b[j - 1]:
                    dp[i, j] = dp[i - 1, j - 1]
                else:
                    dp[i, j] = 1 + torch.min(torch.stack([dp[i - 1, j], dp[i, j - 1], dp[i - 1, j - 1]]))
        return dp[n, m]

    inputs = [(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 3, 4])),
              (torch.tensor([5, 2, 3, 4]), torch.tensor([1, 3, 9])),
              (torch.tensor([1, 1, 2]), torch.tensor([2, 1, 1, 0]))]
    return Program(levenshtein, inputs)


# --- Sinkhorn-Knopp (optimal transport) until the marginals converge ---------------------
def p_sinkhorn():
    def sinkhorn(cost, eps: float = 0.1, iters: int = 100, tol: float = 1e-6):
        K = torch.exp(-cost / eps)
        n, m = cost.shape
        a = torch.full((n,), 1.0 / n)
        b = torch.full((m,), 1.0 / m)
        u = torch.ones(n)
        v = torch.ones(m)
        for it in range(iters):
            u_prev = u
            u = a / (K @ v)
            v = b / (K.T @ u)
            if (u - u_prev).abs().max() < tol:
                break
        P = u[:, None] * K * v[None, :]
        return P, (P * cost).sum(), it

    g = gen(57)
    inputs = [(torch.rand(3, 4, generator=g),), (torch.rand(3, 4, generator=g),), (torch.rand(4, 2, generator=g),)]
    return Program(sinkhorn, inputs)


# --- an LR range test (fastai-style): raise the lr until the loss blows up ----------------
def p_lr_finder():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def lr_find(x, y, start_lr: float = 1e-3, end_lr: float = 10.0, num_it: int = 12):
        mult = (end_lr / start_lr) ** (1 / num_it)
        lr = start_lr
        best = float("inf")
        lrs, losses = [], []
        for it in range(num_it):
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            lrs.append(lr)
            losses.append(loss.item())
            if loss.item() < best:
                best = loss.item()
            if loss.item() > 4 * best:
                break
            lr *= mult
        return lrs, losses

    g = gen(58)
    inputs = [(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(3)]
    return Program(lr_find, inputs, lambda: dict(params_of(model), lr=opt.param_groups[0]["lr"]))


# --- schedulers people chain: OneCycleLR and CosineAnnealingWarmRestarts ----------------
def p_onecycle_and_warm_restarts():
    m1, m2 = nn.Linear(3, 2), nn.Linear(3, 2)
    o1 = torch.optim.SGD(m1.parameters(), lr=0.1, momentum=0.9)
    o2 = torch.optim.Adam(m2.parameters(), lr=0.01)
    s1 = torch.optim.lr_scheduler.OneCycleLR(o1, max_lr=0.5, total_steps=10)
    s2 = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o2, T_0=2, T_mult=2)

    def step(x, y):
        l1 = F.cross_entropy(m1(x), y)
        l2 = F.cross_entropy(m2(x), y)
        o1.zero_grad()
        o2.zero_grad()
        (l1 + l2).backward()
        o1.step()
        o2.step()
        s1.step()
        s2.step()
        return l1.item(), l2.item(), s1.get_last_lr()[0], s2.get_last_lr()[0]

    g = gen(59)
    inputs = [(torch.randn(4, 3, generator=g), torch.randint(0, 2, (4,), generator=g)) for _ in range(4)]
    return Program(step, inputs, lambda: dict(params_of(m1, m2), m=o1.param_groups[0]["momentum"],
                                              lr1=o1.param_groups[0]["lr"], lr2=o2.param_groups[0]["lr"]))


# --- time_sequence_prediction's own training: LBFGS with a closure, float64 ---------------
def p_time_sequence_lbfgs():
    seq = Sequence().double()
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=2)

    def train_step(input, target):
        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            loss.backward()
            return loss
        optimizer.step(closure)
        return closure().detach()

    g = gen(60)
    inputs = [(torch.randn(1, 4, generator=g, dtype=torch.float64), torch.randn(1, 4, generator=g, dtype=torch.float64))
              for _ in range(3)]
    return Program(train_step, inputs, lambda: params_of(seq))


# --- EM for a 1-D Gaussian mixture until the log-likelihood stops improving --------------
def p_gmm_em():
    def em(x, k: int = 2, iters: int = 30, tol: float = 1e-3):
        mu = torch.linspace(float(x.min()), float(x.max()), k)
        var = torch.ones(k)
        pi = torch.full((k,), 1.0 / k)
        prev_ll = -math.inf
        history = []
        for it in range(iters):
            logp = -0.5 * ((x[:, None] - mu) ** 2 / var + torch.log(2 * math.pi * var)) + torch.log(pi)
            ll = torch.logsumexp(logp, dim=1).sum()
            resp = torch.softmax(logp, dim=1)
            nk = resp.sum(0)
            mu = (resp * x[:, None]).sum(0) / nk
            var = (resp * (x[:, None] - mu) ** 2).sum(0) / nk + 1e-6
            pi = nk / x.numel()
            history.append(ll)
            if ll - prev_ll < tol:
                break
            prev_ll = ll
        return mu, var, pi, len(history)

    g = gen(61)
    inputs = [(torch.cat([torch.randn(6, generator=g) - 2, torch.randn(6, generator=g) + 2]),) for _ in range(3)]
    return Program(em, inputs)


# --- d2l.ai helpers converted on their own: sgd(params, lr, bs) and grad_clipping --------
def _leaves_with_grads(g):
    params = [torch.randn(3, 2, generator=g).requires_grad_(), torch.randn(2, generator=g).requires_grad_()]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)
    return params


def p_d2l_grad_clipping_helper():
    def grad_clipping(params, theta):
        """Clip the gradient."""
        norm = torch.sqrt(sum(torch.sum((p.grad ** 2)) for p in params))
        if norm > theta:
            for param in params:
                param.grad[:] *= theta / norm

    g = gen(71)
    inputs = []
    for theta in (0.01, 100.0, 0.5):
        params = _leaves_with_grads(g)
        inputs.append((params, theta))
    return Program(grad_clipping, inputs)


def p_d2l_sgd_on_argument_params():
    def sgd(params, lr, batch_size):
        with torch.no_grad():
            for param in params:
                param -= lr * param.grad / batch_size
                param.grad.zero_()

    g = gen(72)
    inputs = []
    for lr in (0.1, 0.5, 0.1):
        params = _leaves_with_grads(g)
        inputs.append((params, lr, 4))
    return Program(sgd, inputs)


# --- saliency map and the FGSM tutorial's test loop ----------------------------------------
def p_saliency_map():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4, 5))
    model.eval()

    def saliency(x, target=None):
        x.requires_grad_()
        scores = model(x)
        if target is None:
            target = scores.argmax(1)
        score = scores.gather(1, target.view(-1, 1)).sum()
        score.backward()
        sal, _ = torch.max(x.grad.data.abs(), dim=1)
        return sal

    g = gen(73)
    inputs = [(torch.randn(2, 3, 4, 4, generator=g), None), (torch.randn(2, 3, 4, 4, generator=g), torch.tensor([1, 2])),
              (torch.randn(3, 3, 4, 4, generator=g), None)]
    return Program(saliency, inputs, lambda: params_of(model))


def p_fgsm_test_loop():
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3), nn.LogSoftmax(dim=1))
    model.eval()

    def fgsm_attack(image, epsilon, data_grad):
        sign_data_grad = data_grad.sign()
        perturbed_image = image + epsilon * sign_data_grad
        perturbed_image = torch.clamp(perturbed_image, 0, 1)
        return perturbed_image

    def test(samples, epsilon):
        correct = 0
        adv_examples = []
        for data, target in samples:
            data.requires_grad = True
            output = model(data)
            init_pred = output.max(1, keepdim=True)[1]
            if init_pred.item() != target.item():
                continue
            loss = F.nll_loss(output, target)
            model.zero_grad()
            loss.backward()
            data_grad = data.grad.data
            perturbed_data = fgsm_attack(data, epsilon, data_grad)
            output = model(perturbed_data)
            final_pred = output.max(1, keepdim=True)[1]
            if final_pred.item() == target.item():
                correct += 1
            elif len(adv_examples) < 2:
                adv_ex = perturbed_data.squeeze().detach()
                adv_examples.append((init_pred.item(), final_pred.item(), adv_ex))
        final_acc = correct / float(len(samples))
        return final_acc, adv_examples

    g = gen(74)
    inputs = []
    for eps in (0.0, 0.3, 0.1):
        samples = []
        for _ in range(4):
            d = torch.rand(1, 1, 4, 4, generator=g)
            samples.append((d, model(d).argmax(1) if _ % 2 == 0 else torch.randint(0, 3, (1,), generator=g)))
        inputs.append((samples, eps))
    return Program(test, inputs, lambda: params_of(model))


# --- inference helpers that hand back numpy / Python lists ---------------------------------
def p_predict_numpy_and_tolist():
    model = nn.Sequential(nn.Linear(4, 3))
    model.eval()

    @torch.no_grad()
    def predict(x):
        probs = model(x).softmax(-1)
        preds = probs.argmax(-1)
        return probs.cpu().numpy(), preds.tolist()

    g = gen(75)
    inputs = [(torch.randn(n, 4, generator=g),) for n in (2, 2, 5)]
    return Program(predict, inputs)


# --- seeded sampling inside the function, and an unused timer -----------------------------
def p_seeded_sampling():
    def sample(mu, seed: int, n: int = 3):
        torch.manual_seed(seed)
        eps = torch.randn(n, mu.numel())
        return mu + eps

    inputs = [(torch.zeros(2), 1), (torch.ones(2), 2), (torch.zeros(3), 1)]
    return Program(sample, inputs)


def p_timed_step():
    import time
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        batch_time = time.perf_counter() - t0
        return loss

    g = gen(77)
    inputs = [(torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)) for _ in range(3)]
    return Program(step, inputs, lambda: params_of(model))


# --- an in-place helper returning its argument ----------------------------------------------
def p_inplace_normalize_returns_arg():
    def standardize_(x, eps: float = 1e-5):
        mean = x.mean(dim=0, keepdim=True)
        std = x.std(dim=0, keepdim=True)
        x.sub_(mean).div_(std + eps)
        return x

    g = gen(78)
    inputs = [(torch.randn(4, 3, generator=g),) for _ in range(3)]
    return Program(standardize_, inputs)


# --- Grad-CAM with a forward hook storing activations and autograd.grad --------------------
def p_grad_cam():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    feats = {}
    model[3].register_forward_hook(lambda m, i, o: feats.__setitem__("a", o))

    def gradcam(x, cls=None):
        logits = model(x)
        if cls is None:
            cls = logits.argmax(1)
        score = logits.gather(1, cls[:, None]).sum()
        grads = torch.autograd.grad(score, feats["a"])[0]
        weights = grads.mean(dim=(2, 3), keepdim=True)
        cam = F.relu((weights * feats["a"]).sum(1))
        cam = cam / (cam.amax(dim=(1, 2), keepdim=True) + 1e-8)
        return cam, cls

    g = gen(79)
    inputs = [(torch.randn(2, 3, 5, 5, generator=g),), (torch.randn(2, 3, 5, 5, generator=g), torch.tensor([0, 2])),
              (torch.randn(1, 3, 6, 6, generator=g),)]
    return Program(gradcam, inputs, lambda: params_of(model))


# --- Hugging Face DataCollatorForLanguageModeling.torch_mask_tokens ------------------------
def p_mlm_mask_tokens():
    mask_token_id, vocab, special = 3, 20, (0, 1, 2)

    def mask_tokens(inputs, mlm_probability: float = 0.15):
        labels = inputs.clone()
        probability_matrix = torch.full(labels.shape, mlm_probability)
        special_tokens_mask = torch.zeros(labels.shape, dtype=torch.bool)
        for t in special:
            special_tokens_mask |= labels == t
        probability_matrix.masked_fill_(special_tokens_mask, value=0.0)
        masked_indices = torch.bernoulli(probability_matrix).bool()
        labels[~masked_indices] = -100
        indices_replaced = torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked_indices
        inputs[indices_replaced] = mask_token_id
        indices_random = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & masked_indices & ~indices_replaced
        random_words = torch.randint(vocab, labels.shape, dtype=torch.long)
        inputs[indices_random] = random_words[indices_random]
        return inputs, labels

    g = gen(80)
    inputs = [(torch.randint(0, vocab, (2, 8), generator=g), 0.5) for _ in range(2)] + \
             [(torch.randint(0, vocab, (3, 5), generator=g), 0.15)]
    return Program(mask_tokens, inputs)


# --- CleanRL PPO: GAE with a chained assignment in a reversed loop ------------------------
def p_ppo_gae():
    def gae(rewards, values, dones, next_value, next_done, gamma: float = 0.99, gae_lambda: float = 0.95):
        num_steps = rewards.size(0)
        advantages = torch.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(num_steps)):
            if t == num_steps - 1:
                nextnonterminal = 1.0 - next_done
                nextvalues = next_value
            else:
                nextnonterminal = 1.0 - dones[t + 1]
                nextvalues = values[t + 1]
            delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
        returns = advantages + values
        return advantages, returns

    g = gen(81)
    inputs = [(torch.randn(5, 2, generator=g), torch.randn(5, 2, generator=g), (torch.rand(5, 2, generator=g) < 0.3).float(),
               torch.randn(2, generator=g), torch.zeros(2)) for _ in range(3)]
    return Program(gae, inputs)


# --- a KV cache dict passed in and filled by the call ---------------------------------------
def p_kv_cache_dict_argument():
    attn = MinGPTAttention(8, 2, 16)
    attn.eval()

    def step(x, cache):
        B, T, C = x.shape
        q, k, v = attn.c_attn(x).split(8, dim=2)
        if cache.get("k") is not None:
            k = torch.cat([cache["k"], k], dim=1)
            v = torch.cat([cache["v"], v], dim=1)
        cache["k"], cache["v"] = k, v
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C)
        return att.softmax(-1) @ v

    g = gen(82)
    inputs = [(torch.randn(1, 2, 8, generator=g), {}),
              (torch.randn(1, 1, 8, generator=g), {"k": torch.randn(1, 2, 8, generator=g), "v": torch.randn(1, 2, 8, generator=g)}),
              (torch.randn(1, 1, 8, generator=g), {"k": torch.randn(1, 3, 8, generator=g), "v": torch.randn(1, 3, 8, generator=g)})]
    return Program(step, inputs)


# --- torchvision RandomResizedCrop.get_params + crop + resize, and a random flip ----------
def p_random_resized_crop():
    def get_params(img, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
        height, width = img.shape[-2:]
        area = height * width
        log_ratio = torch.log(torch.tensor(ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
            aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                i = torch.randint(0, height - h + 1, size=(1,)).item()
                j = torch.randint(0, width - w + 1, size=(1,)).item()
                return i, j, h, w
        # Fallback to central crop
        w, h = width, height
        i = (height - h) // 2
        j = (width - w) // 2
        return i, j, h, w

    def transform(img, size: int = 4):
        i, j, h, w = get_params(img)
        img = img[..., i:i + h, j:j + w]
        img = F.interpolate(img[None], size=(size, size), mode="bilinear", align_corners=False)[0]
        if torch.rand(1) < 0.5:
            img = img.flip(-1)
        return img, (i, j, h, w)

    g = gen(83)
    inputs = [(torch.rand(3, 8, 8, generator=g),) for _ in range(4)]
    return Program(transform, inputs)


# --- group samples by label into a defaultdict (keys from tensor values) ------------------
def p_group_by_label():
    import collections

    def group(X, Y):
        groups = collections.defaultdict(list)
        for x, y in zip(X, Y):
            groups[int(y)].append(x)
        return {k: torch.stack(v).mean(0) for k, v in sorted(groups.items())}

    g = gen(84)
    inputs = [(torch.randn(6, 2, generator=g), torch.randint(0, 3, (6,), generator=g)) for _ in range(3)]
    return Program(group, inputs)


# --- k-nearest neighbours with torch.mode votes ---------------------------------------------
def p_knn_classifier():
    def knn(Xtr, ytr, Xq, k: int = 3):
        d = torch.cdist(Xq, Xtr)
        idx = d.topk(k, largest=False).indices
        votes = ytr[idx]
        pred = torch.mode(votes, dim=1).values
        conf = (votes == pred[:, None]).float().mean(1)
        return pred, conf

    g = gen(85)
    inputs = [(torch.randn(10, 2, generator=g), torch.randint(0, 3, (10,), generator=g), torch.randn(n, 2, generator=g))
              for n in (4, 4, 6)]
    return Program(knn, inputs)


# --- pad_sequence collate with sorting by length (a DataLoader collate_fn) ----------------
def p_collate_pad_sort():
    from torch.nn.utils.rnn import pad_sequence

    def collate(batch):
        batch = sorted(batch, key=lambda item: item[0].size(0), reverse=True)
        seqs, labels = zip(*batch)
        lengths = torch.tensor([s.size(0) for s in seqs])
        padded = pad_sequence(seqs, batch_first=True, padding_value=0)
        return padded, lengths, torch.stack(labels)

    g = gen(86)
    inputs = [([(torch.randint(1, 9, (n,), generator=g), torch.tensor(n % 2)) for n in lens],)
              for lens in ((3, 5, 2), (3, 5, 2), (4, 1))]
    return Program(collate, inputs)


# --- Grad-CAM with the usual def-hook spelling (stores the output, not detached) -----------
def p_grad_cam_def_hook():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4, 3))
    activations = {}

    def save_activation(module, inp, out):
        activations["value"] = out

    model[1].register_forward_hook(save_activation)

    def gradcam(x):
        logits = model(x)
        cls = logits.argmax(1)
        score = logits.gather(1, cls[:, None]).sum()
        grads = torch.autograd.grad(score, activations["value"])[0]
        cam = F.relu((grads.mean(dim=(2, 3), keepdim=True) * activations["value"]).sum(1))
        return cam

    g = gen(90)
    inputs = [(torch.randn(2, 3, 5, 5, generator=g),) for _ in range(3)]
    return Program(gradcam, inputs, lambda: params_of(model))


# --- a mask helper memoized with functools.lru_cache, called at several lengths ------------
def p_lru_cached_causal_mask():
    import functools

    @functools.lru_cache(maxsize=None)
    def causal_mask(T):
        return torch.triu(torch.full((T, T), float("-inf")), diagonal=1)

    def attend(q, k, v):
        T = q.size(-2)
        att = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + causal_mask(T)
        return att.softmax(-1) @ v

    g = gen(91)
    inputs = [tuple(torch.randn(1, T, 4, generator=g) for _ in range(3)) for T in (3, 4, 5, 6, 3)]
    return Program(attend, inputs)


# --- detections sorted in Python by a tensor score (a hand NMS over a Python list) ---------
def p_sorted_by_tensor_key():
    def top_dets(dets, k: int = 2):
        dets = sorted(list(dets), key=lambda d: d[4], reverse=True)
        kept = []
        for d in dets:
            if len(kept) >= k:
                break
            kept.append(d)
        return torch.stack(kept)

    g = gen(92)
    inputs = [(torch.rand(4, 5, generator=g),) for _ in range(3)]
    return Program(top_dets, inputs)


def p_python_max_over_tensors():
    def best_epoch(val_losses):
        best_i = min(range(len(val_losses)), key=lambda i: val_losses[i])
        best = max(val_losses)
        return best_i, best

    g = gen(93)
    inputs = [([torch.rand((), generator=g) for _ in range(4)],) for _ in range(3)]
    return Program(best_epoch, inputs)


# --- a dict key chosen by a tensor condition -------------------------------------------------
def p_dict_key_from_tensor_branch():
    def route(x):
        mode = "pos" if x.sum() > 0 else "neg"
        return {mode: x * 2}

    inputs = [(torch.ones(3),), (-torch.ones(3),), (torch.ones(3),)]
    return Program(route, inputs)


# --- a timm-style meter that accepts tensors or floats (isinstance on .item()) ------------
class TensorAwareMeter:
    """A meter fed tensors or numbers (timm's update, preceded by an isinstance test)."""

    def __init__(self):
        self.sum, self.count = 0.0, 0

    def update(self, val, n=1):
        if isinstance(val, torch.Tensor):
            val = val.item()
        self.sum += val * n
        self.count += n

    @property
    def avg(self):
        return self.sum / self.count


def p_meter_isinstance_item():
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    meter = TensorAwareMeter()

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        meter.update(loss.detach(), x.size(0))
        kind = type(loss.item()).__name__
        return meter.avg, kind, isinstance(loss.item(), float)

    g = gen(94)
    inputs = [(torch.randn(4, 3, generator=g), torch.randint(0, 2, (4,), generator=g)) for _ in range(3)]
    return Program(step, inputs, lambda: dict(params_of(model), avg=meter.avg, n=meter.count))


# --- torchvision train_one_epoch's non-finite loss check -----------------------------------
def p_nonfinite_loss_raises():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        loss = F.mse_loss(model(x), y)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            raise ValueError(f"Loss is {loss_value}, stopping training")
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss_value

    g = gen(95)
    inputs = [(torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)),
              (torch.randn(4, 3, generator=g), torch.full((4, 1), float("nan"))),
              (torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g))]
    return Program(step, inputs, lambda: params_of(model))


# --- aliasing: an in-place update through a view of the argument --------------------------
def p_view_alias_writes():
    def ema_update_rows(table, idx, vals, decay: float = 0.9):
        flat = table.view(-1, table.size(-1))
        for i in range(idx.numel()):
            row = flat[idx[i]]
            if vals[i].abs().sum() > 0:
                row.mul_(decay).add_(vals[i], alpha=1 - decay)
        return table.sum()

    g = gen(96)
    inputs = [(torch.randn(2, 3, 4, generator=g), torch.tensor([0, 5, 0]), torch.randn(3, 4, generator=g)),
              (torch.randn(2, 3, 4, generator=g), torch.tensor([1, 2, 3]),
               torch.randn(3, 4, generator=g) * (torch.arange(3) != 1)[:, None]),
              (torch.randn(2, 3, 4, generator=g), torch.tensor([4, 4, 4]), torch.randn(3, 4, generator=g))]
    return Program(ema_update_rows, inputs)


# --- a data-dependent number of refinement steps (int(.item()) as a range) ----------------
def p_item_range_loop():
    def refine(x, n_steps):
        k = int(n_steps.item())
        for _ in range(k):
            x = x - 0.1 * (x - x.mean())
        return x, k

    inputs = [(torch.arange(4.0), torch.tensor(2)), (torch.arange(4.0), torch.tensor(5)),
              (torch.arange(4.0), torch.tensor(0))]
    return Program(refine, inputs)


# --- a recursive split with a Python work list (quadtree-ish) -------------------------------
def p_work_list_split():
    def split(x, thresh: float = 1.5):
        stack = [x]
        leaves = []
        while stack:
            t = stack.pop()
            if t.numel() > 1 and t.sum() > thresh:
                a, b = t.chunk(2)
                stack.append(a)
                stack.append(b)
            else:
                leaves.append(t.sum())
        return torch.stack(leaves)

    g = gen(97)
    inputs = [(torch.rand(8, generator=g),) for _ in range(3)]
    return Program(split, inputs)


# --- the feature-extraction recipe: a forward hook fills a dict read after the call -------
def p_forward_hook_features():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    activation = {}

    def get_activation(name):
        def hook(model, input, output):
            activation[name] = output.detach()
        return hook

    model[1].register_forward_hook(get_activation("relu"))

    def predict(x):
        return model(x).argmax(-1)

    g = gen(100)
    inputs = [(torch.randn(n, 3, generator=g),) for n in (2, 2, 5)]
    return Program(predict, inputs, lambda: dict(activation))


# --- the StackOverflow EarlyStopper object, consulted once per epoch ------------------------
class EarlyStopper:
    def __init__(self, patience=1, min_delta=0):
        self.patience = patience
        self.min_delta = min_delta
        self.counter = 0
        self.min_validation_loss = float("inf")

    def early_stop(self, validation_loss):
        if validation_loss < self.min_validation_loss:
            self.min_validation_loss = validation_loss
            self.counter = 0
        elif validation_loss > (self.min_validation_loss + self.min_delta):
            self.counter += 1
            if self.counter >= self.patience:
                return True
        return False


def p_early_stopper_object():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    early_stopper = EarlyStopper(patience=2, min_delta=0.01)

    def epoch(x, y, xv, yv):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        with torch.no_grad():
            validation_loss = F.mse_loss(model(xv), yv).item()
        stop = early_stopper.early_stop(validation_loss)
        return validation_loss, stop

    return Program(epoch, _fit_inputs(101, 6, 1, calls=5), lambda: dict(params_of(model), counter=early_stopper.counter,
                                               best=early_stopper.min_validation_loss))


# --- random draws inside tensor-dependent loops and branches (the RNG must advance alike) ---
def p_dropout_in_data_dependent_loop():
    def f(h, train: bool = True):
        steps = 0
        while h.norm() > 1.0 and steps < 20:
            h = F.dropout(h, 0.5, training=train) * 0.7
            steps += 1
        if h.sum() > 0:
            h = h + torch.randn_like(h) * 0.01
        return h, steps

    g = gen(102)
    inputs = [(torch.randn(6, generator=g) * s,) for s in (1.0, 3.0, 0.1, 5.0)]
    return Program(f, inputs)


# --- a Python list argument the call appends to (beam hypotheses kept by the caller) -------
def p_list_argument_appended():
    def extend_hyps(hyps, logits, k: int = 2):
        top = logits.topk(k)
        for score, idx in zip(top.values, top.indices):
            hyps.append((score, idx))
        return len(hyps)

    g = gen(103)
    inputs = [([], torch.randn(5, generator=g)), ([(torch.tensor(0.5), torch.tensor(1))], torch.randn(5, generator=g)),
              ([], torch.randn(7, generator=g))]
    return Program(extend_hyps, inputs)


# --- a research-code optimizer (Lion) subclassing torch.optim.Optimizer ---------------------
class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data.mul_(1 - group["lr"] * group["weight_decay"])
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                beta1, beta2 = group["betas"]
                update = exp_avg * beta1 + grad * (1 - beta1)
                p.add_(torch.sign(update), alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)
        return loss


def p_custom_optimizer_lion():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = Lion(model.parameters(), lr=1e-2, weight_decay=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    g = gen(104)
    inputs = [(torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)) for _ in range(3)]
    return Program(step, inputs, lambda: dict(params_of(model),
                                              state=[opt.state[p]["exp_avg"].clone() for p in model.parameters()
                                                     if p in opt.state]))


# --- a replay memory (deque with maxlen) on the agent, pushed from the converted step -----
def p_replay_memory_push():
    import collections
    Transition = collections.namedtuple("Transition", ("state", "action", "next_state", "reward"))

    class ReplayMemory:
        def __init__(self, capacity):
            self.memory = collections.deque([], maxlen=capacity)

        def push(self, *args):
            self.memory.append(Transition(*args))

        def __len__(self):
            return len(self.memory)

    memory = ReplayMemory(3)
    net = nn.Linear(4, 2)

    def act_and_store(state, next_state, reward):
        with torch.no_grad():
            action = net(state).max(1).indices.view(1, 1)
        memory.push(state, action, next_state, reward)
        return action, len(memory)

    g = gen(105)
    inputs = [(torch.randn(1, 4, generator=g), torch.randn(1, 4, generator=g), torch.rand(1, generator=g))
              for _ in range(4)]
    return Program(act_and_store, inputs, lambda: [tuple(t) for t in memory.memory])


# --- an infinite data loader generator consumed with next() inside the step --------------
def infinite_loader(loader):
    """improved-diffusion / WGAN-GP style: cycle over a loader forever."""
    while True:
        yield from loader


def p_infinite_loader_next():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = gen(110)
    batches = [(torch.randn(2, 3, generator=g), torch.randn(2, 1, generator=g)) for _ in range(4)]
    data = infinite_loader(batches)

    def step():
        x, y = next(data)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return Program(step, [() for _ in range(3)], lambda: params_of(model))


def p_itertools_count_warmup():
    import itertools
    model = nn.Linear(3, 1)
    step_counter = itertools.count(1)
    warmup = 4

    def step(x):
        it = next(step_counter)
        scale = min(1.0, it / warmup)
        return model(x) * scale

    g = gen(111)
    return Program(step, [(torch.randn(2, 3, generator=g),) for _ in range(3)])


# --- the DQN tutorial's select_action: a step counter in a module-level dict, in a helper -
DQN_STATE = {"steps_done": 0}


def p_dqn_select_action_global_counter():
    EPS_START, EPS_END, EPS_DECAY = 0.9, 0.05, 3
    policy_net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    DQN_STATE["steps_done"] = 0

    def eps_threshold():
        eps = EPS_END + (EPS_START - EPS_END) * math.exp(-1.0 * DQN_STATE["steps_done"] / EPS_DECAY)
        DQN_STATE["steps_done"] += 1
        return eps

    def q_and_eps(state):
        with torch.no_grad():
            q = policy_net(state)
        return q.max(1).indices, eps_threshold()

    g = gen(112)
    return Program(q_and_eps, [(torch.randn(1, 4, generator=g),) for _ in range(3)],
                   lambda: dict(DQN_STATE))


# --- a history object bound as a default argument (the lambda/def default-binding idiom) --
class History:
    def __init__(self):
        self.losses = []


def p_history_default_argument():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = History()

    def step(x, y, history=history):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.losses.append(loss.detach())
        return len(history.losses)

    g = gen(113)
    inputs = [(torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)) for _ in range(3)]
    return Program(step, inputs, lambda: dict(params_of(model), losses=list(history.losses)))


# --- module-level caches and metric logs filled by helper functions ----------------------
_MASK_CACHE = {}


def get_causal_mask(T):
    """Older HF/fairseq style: build each length's mask once, keep it in a module dict."""
    if T not in _MASK_CACHE:
        _MASK_CACHE[T] = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
    return _MASK_CACHE[T]


def p_global_mask_cache_helper():
    _MASK_CACHE.clear()

    def attend(q, k, v):
        att = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + get_causal_mask(q.size(-2))
        return att.softmax(-1) @ v

    g = gen(120)
    inputs = [tuple(torch.randn(1, T, 4, generator=g) for _ in range(3)) for T in (3, 3, 4)]
    return Program(attend, inputs, lambda: dict(_MASK_CACHE))


METRICS = {}


def log_metric(name, value):
    """A wandb-less logger: every value of a metric, in a module-level dict of lists."""
    METRICS.setdefault(name, []).append(value)


def p_global_metric_log_helper():
    METRICS.clear()
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        log_metric("train/loss", loss.item())
        return loss.detach()

    g = gen(121)
    inputs = [(torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)) for _ in range(3)]
    return Program(step, inputs, lambda: dict(params_of(model), metrics={k: list(v) for k, v in METRICS.items()}))


# --- DataLoader epochs inside the converted function -------------------------------------
def _loader_epoch(shuffle):
    from torch.utils.data import DataLoader, TensorDataset
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = gen(130)
    loader = DataLoader(TensorDataset(torch.randn(6, 3, generator=g), torch.randn(6, 1, generator=g)),
                        batch_size=2, shuffle=shuffle)

    def epoch():
        total = 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item()
        return total / len(loader)

    return Program(epoch, [()] * 3, lambda: params_of(model))


def p_dataloader_epoch():
    return _loader_epoch(shuffle=False)


def p_dataloader_epoch_shuffled():
    """shuffle=True draws its order from the global RNG inside DataLoader's sampler."""
    return _loader_epoch(shuffle=True)


def batch_iter(X, Y, bs):
    """A hand-written batching generator (the d2l data_iter spelling)."""
    for i in range(0, X.size(0), bs):
        yield X[i:i + bs], Y[i:i + bs]


def p_generator_batches():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def epoch(X, Y):
        total = 0.0
        for x, y in batch_iter(X, Y, 2):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item()
        return total

    g = gen(131)
    return Program(epoch, [(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g)) for n in (4, 4, 6)],
                   lambda: params_of(model))


# ----------------------------------------------------------------------------- registry
PROGRAMS = {name[2:]: fn for name, fn in list(globals().items()) if name.startswith("p_") and callable(fn)}
