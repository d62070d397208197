"""Programs from other projects whose ``forward`` leaves state on its modules (issue 13).

Each follows the structure and torch calls of a named public source, at tiny sizes (written
after it, not copied): the spectral-norm GAN discriminator of pytorch/examples-style SNGAN
code, a pruned LeNet (PyTorch's pruning tutorial), WaveNet/Tacotron-style old
``weight_norm``, minGPT/ViT attention caching its causal mask on ``self``, DINO's loss with
its EMA ``center`` buffer rebound, a custom norm updating a running mean in place, hooks
on the model itself (a pre-hook normalizing the input, a hook post-processing the output),
the forums' feature-extraction recipe (``get_activation(name)`` hooks storing
activations in a dict), and DANN with BinaryNet's straight-through sign and the gradient
reversal layer (custom ``autograd.Function``s: their own backward). Each runs eagerly and through ``to_graph`` (default and
strict: no fallback) on calls with other inputs, in train and eval mode where they differ;
the results, the module state after every call (``state_dict`` and the tensors held as
plain attributes: the cached mask, spectral norm's ``weight``), and, where it trains, the
gradients must equal eager's.

What this needed (``runtime/module_writes.py``): a tensor the forward stores on a module
of its tree (``self.mask = ...``, ``setattr(module, "weight", ...)`` in a pre-hook, a
buffer rebound) is set by the graph when it runs; one read before being rebound is read
when the graph runs; the guard compares such names by their tensors' meta; a hook's dict
items alike. Hooks on the converted module itself are traced around its forward
(``module_hooks.hooked_call``).
"""
import os
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.prune as prune

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.e2e.e2e_helpers import assert_same  # noqa: E402
from transpiler import ConversionError, FallbackWarning, to_graph  # noqa: E402

THIS_FILE = os.path.basename(__file__)


# ----------------------------------------------------------------------------- runner
def _tensor_attributes(model):
    """Every module's plain tensor attributes (not parameters or buffers), by path."""
    return {f"{name}.{k}": v for name, m in model.named_modules()
            for k, v in vars(m).items() if isinstance(v, torch.Tensor)}


def _same_state(conv, eager, where):
    got, exp = conv.state_dict(), eager.state_dict()
    assert list(got) == list(exp), where
    for k in exp:
        assert_same(got[k], exp[k], f"{where}: state_dict[{k!r}]")
    got, exp = _tensor_attributes(conv), _tensor_attributes(eager)
    assert sorted(got) == sorted(exp), where
    for k in exp:
        assert_same(got[k], exp[k], f"{where}: attribute {k}")


def _same_grads(conv, eager, where):
    for (name, p), q in zip(eager.named_parameters(), conv.parameters()):
        assert (p.grad is None) == (q.grad is None), f"{where}: {name}"
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6,
                                       msg=f"{where}: grad of {name}")


def runs_like_eager(make, inputs, *, train=False, loss=None, traces=None):
    """``make()`` (seeded alike) run eagerly and converted (default, then strict) on each
    input tuple: same results, same module state after each call; with ``loss`` (a
    function of the result), a backward after each call, the same gradients, and an SGD
    step on both. Returns
    the default-mode converted module. ``traces``: at most this many traces."""
    converted = None
    for strict in (False, True):
        torch.manual_seed(0)
        eager = make().train(train)
        torch.manual_seed(0)
        model = make().train(train)
        g = to_graph(model, strict=strict)
        for i, args in enumerate(inputs):
            where = f"call {i} ({'strict' if strict else 'default'}, " \
                    f"{'train' if train else 'eval'})"
            with torch.set_grad_enabled(loss is not None):
                torch.manual_seed(10 + i)
                exp = eager(*[a.clone() for a in args])
                torch.manual_seed(10 + i)
                with warnings.catch_warnings():
                    warnings.simplefilter("error", FallbackWarning)
                    got = g(*[a.clone() for a in args])
            assert_same(got, exp, where)
            _same_state(model, eager, where)
            if loss is not None:        # (and a step: the next call sees new weights)
                loss(exp).backward()
                loss(got).backward()
                _same_grads(model, eager, where)
                for m in (eager, model):
                    with torch.no_grad():
                        for p in m.parameters():
                            if p.grad is not None:
                                p -= 0.1 * p.grad
                    m.zero_grad()
        if traces is not None:
            assert g.cache_info().traces <= traces, g.cache_info()
        converted = converted or g
    return converted


def batches(*sizes, shape=(3, 8, 8)):
    return [(torch.randn(b, *shape, generator=torch.Generator().manual_seed(b * 7 + i)),)
            for i, b in enumerate(sizes)]


# ------------------------------------------- SNGAN-style discriminator (spectral_norm)
class SNDiscriminator(nn.Module):
    """The SNGAN/BigGAN-style discriminator of pytorch-gan codebases: every conv and the
    head wrapped in ``torch.nn.utils.spectral_norm``, whose forward pre-hook sets
    ``module.weight = weight_orig / sigma`` and, in train mode, advances ``u``/``v`` by one
    power iteration in place."""

    def __init__(self, nc=3, ndf=8):
        super().__init__()
        sn = nn.utils.spectral_norm
        self.main = nn.Sequential(
            sn(nn.Conv2d(nc, ndf, 3, 1, 1)), nn.LeakyReLU(0.1),
            sn(nn.Conv2d(ndf, ndf * 2, 4, 2, 1)), nn.LeakyReLU(0.1),
            sn(nn.Conv2d(ndf * 2, ndf * 2, 3, 1, 1)), nn.LeakyReLU(0.1))
        self.fc = sn(nn.Linear(ndf * 2 * 4 * 4, 1))

    def forward(self, x):
        h = self.main(x)
        return self.fc(h.flatten(1))


def test_spectral_norm_discriminator_train_step_gradients():
    runs_like_eager(SNDiscriminator, batches(2, 3, 2), train=True,
                    loss=lambda out: F.softplus(-out).mean(), traces=3)


def test_spectral_norm_discriminator_eval():
    runs_like_eager(SNDiscriminator, batches(2, 3, 2), train=False, traces=3)


def test_spectral_norm_parametrization_train():
    """The newer spelling (``parametrizations.spectral_norm``): its ``_u``/``_v`` buffers."""
    def make():
        sn = nn.utils.parametrizations.spectral_norm
        return nn.Sequential(sn(nn.Linear(6, 8)), nn.ReLU(), sn(nn.Linear(8, 1)))
    inputs = [(torch.randn(4, 6),), (torch.randn(5, 6),), (torch.randn(4, 6),)]
    runs_like_eager(make, inputs, train=True, loss=lambda out: out.square().mean())


# ------------------------------------------- the pruning tutorial's LeNet
class LeNet(nn.Module):
    """PyTorch's pruning tutorial: LeNet with ``prune.random_unstructured`` on conv1's
    weight, ``l1_unstructured`` on fc3's bias and a global L1 pruning of the fc weights;
    each pruned module's forward pre-hook sets ``weight = weight_orig * weight_mask``."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.conv2 = nn.Conv2d(4, 8, 3)
        self.fc1 = nn.Linear(8 * 5 * 5, 16)
        self.fc2 = nn.Linear(16, 12)
        self.fc3 = nn.Linear(12, 10)
        prune.random_unstructured(self.conv1, name="weight", amount=0.3)
        prune.l1_unstructured(self.fc3, name="bias", amount=3)
        prune.global_unstructured([(self.fc1, "weight"), (self.fc2, "weight")],
                                  pruning_method=prune.L1Unstructured, amount=0.2)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.conv2(x))
        x = x.view(-1, int(x.nelement() / x.shape[0]))
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def test_pruned_lenet_train_gradients():
    inputs = batches(2, 3, 2, shape=(1, 16, 16))
    runs_like_eager(LeNet, inputs, train=True,
                    loss=lambda out: F.cross_entropy(out, torch.arange(out.shape[0])),
                    traces=3)


def test_pruned_lenet_eval_and_mask_changed_between_calls():
    """Pruning again between calls (a new mask, a new hook): the next call retraces and
    applies the new mask, as eager does."""
    torch.manual_seed(0)
    eager = LeNet().eval()
    torch.manual_seed(0)
    model = LeNet().eval()
    g = to_graph(model, strict=True)
    x = batches(2, shape=(1, 16, 16))[0][0]
    assert_same(g(x), eager(x))
    for m in (eager, model):
        prune.l1_unstructured(m.conv2, name="weight", amount=0.5)
    assert_same(g(x), eager(x))
    _same_state(model, eager, "after pruning again")


# ------------------------------------------- old weight_norm (WaveNet, Tacotron vocoders)
class WNConvStack(nn.Module):
    """A WaveNet-style residual stack of dilated causal convolutions under the old
    ``torch.nn.utils.weight_norm`` (its pre-hook sets ``weight = g * v / ||v||``)."""

    def __init__(self, ch=6, layers=3):
        super().__init__()
        wn = nn.utils.weight_norm
        self.convs = nn.ModuleList(wn(nn.Conv1d(ch, 2 * ch, 2, dilation=2 ** i))
                                   for i in range(layers))
        self.res = nn.ModuleList(wn(nn.Conv1d(ch, ch, 1)) for _ in range(layers))

    def forward(self, x):
        for conv, res in zip(self.convs, self.res):
            h = conv(F.pad(x, (conv.dilation[0], 0)))
            a, b = h.chunk(2, dim=1)
            x = x + res(torch.tanh(a) * torch.sigmoid(b))
        return x


def test_old_weight_norm_wavenet_stack_gradients():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)      # (weight_norm is deprecated)
        runs_like_eager(WNConvStack, batches(2, 3, shape=(6, 10)), train=True,
                        loss=lambda out: out.square().mean())


# ------------------------------------------- minGPT / ViT: the causal mask cached on self
class CachedMaskAttention(nn.Module):
    """Causal self-attention that builds its mask on first use and again when the length
    changes (``if self.mask is None or self.mask.size(-1) != T``), as ViT/GPT ports that
    do not register a ``bias`` buffer do."""

    def __init__(self, d=8, heads=2):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads
        self.mask = None

    def forward(self, x):
        B, T, C = x.shape
        if self.mask is None or self.mask.size(-1) != T:
            self.mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (C // self.heads) ** 0.5
        att = att.masked_fill(~self.mask, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


def test_cached_causal_mask_is_left_on_the_module():
    seq = [torch.randn(2, 4, 8), torch.randn(3, 4, 8), torch.randn(2, 6, 8),
           torch.randn(2, 4, 8)]
    g = runs_like_eager(CachedMaskAttention, [(x,) for x in seq], train=False)
    assert g.original_module.mask.shape == (1, 1, 4, 4)


def test_cached_mask_gradients():
    seq = [torch.randn(2, 4, 8), torch.randn(2, 5, 8)]
    runs_like_eager(CachedMaskAttention, [(x,) for x in seq], train=True,
                    loss=lambda out: out.square().mean())


# ------------------------------------------- DINO: the teacher's EMA center, rebound
class DINOLoss(nn.Module):
    """DINO's loss: teacher outputs centered and sharpened, cross-entropy with the
    student's; ``update_center`` rebinds the ``center`` buffer to its EMA under
    ``no_grad`` after the loss, as main_dino.py does."""

    def __init__(self, out_dim=6, teacher_temp=0.04, student_temp=0.1, center_momentum=0.9):
        super().__init__()
        self.student_temp, self.teacher_temp = student_temp, teacher_temp
        self.center_momentum = center_momentum
        self.register_buffer("center", torch.zeros(1, out_dim))

    def forward(self, student_output, teacher_output):
        student_out = student_output / self.student_temp
        teacher_out = F.softmax((teacher_output - self.center) / self.teacher_temp, dim=-1)
        loss = torch.sum(-teacher_out.detach() * F.log_softmax(student_out, dim=-1), dim=-1)
        self.update_center(teacher_output)
        return loss.mean()

    @torch.no_grad()
    def update_center(self, teacher_output):
        batch_center = torch.sum(teacher_output, dim=0, keepdim=True) / len(teacher_output)
        self.center = self.center * self.center_momentum + \
            batch_center * (1 - self.center_momentum)


def test_dino_center_buffer_rebound_every_call():
    inputs = [(torch.randn(4, 6), torch.randn(4, 6)) for _ in range(4)]
    g = runs_like_eager(DINOLoss, inputs, train=True, traces=2)
    assert "center" in dict(g.original_module.named_buffers())


def test_dino_center_with_student_gradients():
    class Student(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(5, 6)
            self.loss = DINOLoss()

        def forward(self, x, teacher_output):
            return self.loss(self.head(x), teacher_output)
    inputs = [(torch.randn(4, 5), torch.randn(4, 6)) for _ in range(3)]
    runs_like_eager(Student, inputs, train=True, loss=lambda out: out)


# ------------------------------------------- a custom norm's running mean
class RunningMeanNorm(nn.Module):
    """A hand-written norm (as in older GAN and RL code): in train mode it normalizes by
    the batch mean and updates ``running_mean`` in place (``mul_(m).add_(...)``); the
    variant rebinds it instead. Eval mode uses the running mean."""

    def __init__(self, d=5, momentum=0.1, rebind=False):
        super().__init__()
        self.momentum, self.rebind = momentum, rebind
        self.register_buffer("running_mean", torch.zeros(d))
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        x = self.lin(x)
        if self.training:
            mean = x.mean(0)
            with torch.no_grad():
                if self.rebind:
                    self.running_mean = (1 - self.momentum) * self.running_mean + \
                        self.momentum * mean
                else:
                    self.running_mean.mul_(1 - self.momentum).add_(mean, alpha=self.momentum)
        else:
            mean = self.running_mean
        return x - mean


@pytest.mark.parametrize("rebind", [False, True])
def test_running_mean_norm_train_then_eval(rebind):
    inputs = [(torch.randn(4, 5),), (torch.randn(6, 5),), (torch.randn(4, 5),)]
    runs_like_eager(lambda: RunningMeanNorm(rebind=rebind), inputs, train=True,
                    loss=lambda out: out.square().mean())
    runs_like_eager(lambda: RunningMeanNorm(rebind=rebind), inputs, train=False)


# ------------------------------------------- a tensor kept on self, and a global model
class KeepsFeatures(nn.Module):
    """Grad-CAM style: the forward keeps the last feature map on ``self`` for a later
    look (``self.features = h``); the batch size changes from call to call."""

    def __init__(self):
        super().__init__()
        self.body = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)
        self.features = None

    def forward(self, x):
        h = F.relu(self.body(x))
        self.features = h
        return self.head(h.mean((2, 3)))


def test_features_kept_on_self_with_changing_batch():
    runs_like_eager(KeepsFeatures, batches(2, 3, 4, 2, 3), train=True,
                    loss=lambda out: out.square().mean(), traces=4)


SN_CRITIC = nn.utils.spectral_norm(nn.Linear(5, 1))


def critic_step(x):
    """A function (not a module) calling a module global: its spectral norm stores."""
    return SN_CRITIC(x).mean()


def test_function_calling_a_global_spectral_norm_module():
    state = {k: v.clone() for k, v in SN_CRITIC.state_dict().items()}
    g = to_graph(critic_step, strict=True)
    for i in range(3):
        x = torch.randn(2 + i, 5)
        SN_CRITIC.load_state_dict(state)
        exp, exp_u = critic_step(x), SN_CRITIC.weight_u.clone()
        exp_w = SN_CRITIC.weight.detach().clone()
        SN_CRITIC.load_state_dict(state)
        got = g(x)
        assert_same(got, exp, f"call {i}")
        assert_same(SN_CRITIC.weight_u, exp_u, f"call {i}: u")
        assert_same(SN_CRITIC.weight.detach(), exp_w, f"call {i}: weight")
        state = {k: v.clone() for k, v in SN_CRITIC.state_dict().items()}


# ------------------------------------------- hooks on the converted model itself
def _hooked_classifier():
    """A classifier with hooks registered by the user on the model itself: a pre-hook
    that normalizes the input (returns new args), a hook with kwargs that temperature-
    scales the logits, and a plain hook returning None (called, result unchanged)."""
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))

    def normalize(module, args):
        x, = args
        return ((x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5),)

    def temperature(module, args, kwargs, output):
        return output / 2.0

    def observe(module, args, output):
        assert output.shape[-1] == 3

    model.register_forward_pre_hook(normalize)
    model.register_forward_hook(temperature, with_kwargs=True)
    model.register_forward_hook(observe)
    return model


def test_hooks_on_the_model_itself_run_around_the_graph():
    inputs = [(torch.randn(2, 6),), (torch.randn(4, 6),), (torch.randn(2, 6),)]
    runs_like_eager(_hooked_classifier, inputs, train=True,
                    loss=lambda out: out.logsumexp(-1).mean())
    runs_like_eager(_hooked_classifier, inputs, train=False)


def test_hook_added_after_a_trace_is_run():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    g = to_graph(model, strict=True)
    x = torch.randn(3, 4)
    assert_same(g(x), model(x))
    handle = model.register_forward_hook(lambda m, a, out: out * 3)
    assert_same(g(x), model(x))
    handle.remove()
    assert_same(g(x), model(x))


def test_backward_hook_on_the_model_falls_back():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    model.register_full_backward_hook(lambda m, gi, go: None)
    g = to_graph(model, strict=True)
    with pytest.raises(ConversionError, match="backward"):
        g(torch.randn(2, 4))


# ------------------------------------------- what still falls back, naming the line
class BranchCache(nn.Module):
    """A tensor stored on ``self`` inside a tensor ``if``: which path ran is known only when
    the graph runs, so the store cannot be a node of the top level."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = torch.zeros(4)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:
            self.last = y.mean(0)                   # the store in a tensor branch
        return y


def test_store_in_a_tensor_branch_falls_back_naming_the_line():
    torch.manual_seed(0)
    g = to_graph(BranchCache(), strict=True)
    with pytest.raises(ConversionError) as err:
        g(torch.randn(2, 4))
    assert THIS_FILE in str(err.value)


class FeatureNet(nn.Module):
    """A small CNN whose intermediate activations a user collects with the recipe of the
    PyTorch forums and many tutorials: ``register_forward_hook(get_activation(name))``,
    each hook storing ``output.detach()`` in a global dict."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.fc(x.mean((2, 3)))


ACTIVATION = {}


def get_activation(name):
    def hook(model, input, output):
        ACTIVATION[name] = output.detach()
    return hook


def _feature_net():
    model = FeatureNet()
    model.conv1.register_forward_hook(get_activation("conv1"))
    model.conv2.register_forward_hook(get_activation("conv2"))
    return model


def test_feature_extraction_hooks_fill_the_dict_each_call():
    """Each call leaves that call's activations in the dict, keys in eager's order, with
    batch sizes changing (no trace per call)."""
    torch.manual_seed(0)
    model = _feature_net().eval()
    g = to_graph(model, strict=True)
    ACTIVATION.clear()
    for i, (x,) in enumerate(batches(2, 3, 2, 3, 2)):
        got = g(x)
        seen = dict(ACTIVATION)
        exp = model(x)
        assert_same(got, exp, f"call {i}")
        assert list(seen) == list(ACTIVATION) == ["conv1", "conv2"]
        for k in ACTIVATION:
            assert_same(seen[k], ACTIVATION[k], f"call {i}: activation {k}")
    # (the first trace found the dict empty; then a dynamic graph and a hot size's)
    assert g.cache_info().traces <= 4, g.cache_info()


def test_feature_hook_accumulating_in_its_dict_falls_back():
    """A hook adding to the tensor it stored before would read the first call's tensor
    in every run of the graph: refused (the call runs eagerly, the dict as eager's)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
    sums = {"relu": torch.zeros(6)}
    model[1].register_forward_hook(
        lambda m, args, out: sums.__setitem__("relu", sums["relu"] + out.sum(0)))
    g = to_graph(model)
    x = torch.randn(3, 4)
    with pytest.warns(FallbackWarning, match="first call's tensor"):
        g(x)
    g(x)
    assert_same(sums["relu"], 2 * model(x).sum(0))


def test_feature_hooks_appending_to_a_list_fall_back_naming_the_hook():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    features = []

    def keep(module, args, out):
        features.append(out.detach())               # the append
    model[0].register_forward_hook(keep)
    g = to_graph(model, strict=True)
    with pytest.raises(ConversionError) as err:
        g(torch.randn(3, 4))
    assert f"{THIS_FILE}:" in str(err.value)
    line = int(str(err.value).split(f"{THIS_FILE}:")[1].split(":")[0])
    with open(__file__) as f:
        assert "# the append" in f.read().splitlines()[line - 1]


# ------------------------------------------- custom autograd.Functions in models
class BinarizeSTE(torch.autograd.Function):
    """BinaryNet's sign with a straight-through estimator clipped to |x| <= 1
    (``ctx.save_for_backward``)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sign()

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * (x.abs() <= 1).to(grad_output.dtype)


class ReverseLayer(torch.autograd.Function):
    """DANN's gradient reversal layer, in torch 2's spelling: ``forward`` without ``ctx``
    and a ``setup_context`` keeping ``alpha`` (a None gradient for it)."""

    @staticmethod
    def forward(x, alpha):
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.alpha = inputs[1]

    @staticmethod
    def backward(ctx, grad_output):
        return -ctx.alpha * grad_output, None


class DANN(nn.Module):
    """DANN: a feature extractor with binarized activations, a label classifier, and a
    domain classifier behind the gradient reversal layer."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(6, 8), nn.Tanh())
        self.classifier = nn.Linear(8, 3)
        self.domain = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))

    def forward(self, x, lambd: float = 0.5):
        h = BinarizeSTE.apply(self.features(x) * 2)
        return self.classifier(h), self.domain(ReverseLayer.apply(h, lambd))


def test_dann_with_custom_autograd_functions_gradients():
    inputs = [(torch.randn(4, 6),), (torch.randn(5, 6),), (torch.randn(4, 6),)]
    runs_like_eager(DANN, inputs, train=True,
                    loss=lambda out: out[0].logsumexp(-1).mean() + out[1].square().mean())
