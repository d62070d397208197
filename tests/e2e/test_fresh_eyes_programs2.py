"""Training and inference programs written as other projects write them, run as a new user
would (fresh eyes, second round).

The programs live in ``fresh_eyes_programs2.py`` (one ``p_<name>`` builder each, written
after pytorch/examples, d2l.ai, nanoGPT/minGPT/makemore, torchvision references,
lucidrains, Hugging Face custom loops, CleanRL, the PyTorch tutorials, and textbook
algorithms over tensors). ``run`` builds each twice from one seed, runs one copy eagerly
and one through ``to_graph`` on 3+ calls with other values, sizes, dtypes and structures,
and compares after every call: results (values, dtypes, structure, ``requires_grad``),
printed text, the arguments (in-place writes, ``.grad``), the global RNG state, which
outputs are the arguments, and the program's state (parameters, gradients, buffers,
optimizer lr, Python lists, counters and objects).

Verdicts:
- ``CONVERTS``: converts with no fallback and equals eager.
- ``FALLS_BACK``: a FallbackWarning naming the program's own line, results equal eager;
  strict mode raises ConversionError naming the same line.
- ``NEEDLESS``: falls back (equal to eager) where a graph could hold the program: strict
  xfails asserting it converts.
- ``BUGS``: silently different from eager (a traced tensor left in the user's objects, a
  Python side effect frozen or run twice): strict xfails.
"""
from __future__ import annotations

import re
import warnings

import pytest
import torch

import fresh_eyes_programs2 as programs
from fresh_eyes_programs2 import PROGRAMS, run
from transpiler import ConversionError, to_graph

CONVERTS = [
    "mnist_train_step", "mnist_test_loop",
    "time_sequence_prediction", "reinforce_finish_episode",
    "discounted_returns_tensor", "ppo_gae", "d2l_additive_attention",
    "d2l_masked_softmax_ce_loss", "d2l_train_epoch_accumulator", "seq2seq_teacher_forcing_train",
    "seq2seq_greedy_evaluate", "early_stopping_no_mode_switch", "ema_clip_cosine_step",
    "autocast_bf16_step", "onecycle_and_warm_restarts", "mixup_cutmix_batch",
    "focal_and_smoothing_losses", "nt_xent", "contrastive_triplet", "gumbel_softmax",
    "beam_search", "top_k_top_p_sampling", "ctc_greedy_decode",
    "ctc_greedy_decode_tensor", "nms_by_hand", "nms_matrix_keep_mask", "score_threshold_topk",
    "kmeans", "gmm_em", "crf_forward_algorithm_nll", "dijkstra", "bfs_levels",
    "torchvision_train_one_epoch", "hf_custom_loop_accumulation", "hf_eval_hidden_states",
    "batchnorm_by_hand_buffers", "batchnorm_by_hand_module", "lucidrains_transformer",
    "lucidrains_transformer_grads", "lru_cached_causal_mask", "power_iteration",
    "conjugate_gradient", "sinkhorn", "perceptron", "gcd_and_binary_search", "edit_distance",
    "scratch_lstm_dataclass_state", "per_class_metrics_dict", "psnr_eval", "saliency_map",
    "seeded_sampling", "inplace_normalize_returns_arg", "mlm_mask_tokens",
    "kv_cache_dict_argument", "knn_classifier", "collate_pad_sort", "meter_isinstance_item",
    "nonfinite_loss_raises", "view_alias_writes", "item_range_loop",
    "dropout_in_data_dependent_loop", "dataloader_epoch",
    # d2l's sgd() on closure leaves (tensor_state.note_written_leaf), list.reverse() of a
    # list built in a loop (tensor_list): tests/e2e/test_d2l_training_helpers.py
    "d2l_rnn_scratch_train_step", "viterbi_crf",
    "lr_finder",        # a Python float before a loop appending the carried float64 lr
    # a hook's dict write on a model the function calls: a set_item per run, as to_graph(model)
    "forward_hook_features", "grad_cam", "grad_cam_def_hook",
    # numbers in a closure dict, a plain object, a helper's closure or a module dict, set in
    # tensor branches: carried (runtime/region_numbers.py, runtime/carried_numbers.py)
    "nanogpt_train_step_with_lr_schedule", "early_stopper_object",
    "dqn_epsilon_greedy_and_td_step", "dqn_select_action_global_counter",
    # d2l's helpers on argument leaves: their .grad is in the call's key
    # (runtime/argument_grads.py)
    "d2l_grad_clipping_helper", "d2l_sgd_on_argument_params",
    # sum(losses) / len(losses) of the list it appends to: read when the graph runs
    # (runtime/list_reads.py); its returned number is a 0-d float64 tensor, as any
    # returned .item() (test_fresh_eyes_techniques' test_returned_item_is_python_number)
    "running_loss_list_in_closure",
]

# program -> text of its line the fallback must name
FALLS_BACK = {
    # a helper leaving a traced value in a module-level dict (transpiler/helper_containers.py)
    "global_mask_cache_helper": "def attend(q, k, v):",
    "global_metric_log_helper": "def step(x, y):",
    # reachable state the trace changes (tests/e2e/test_reachable_state_mutation.py)
    "replay_memory_push": "def act_and_store(",                # (push: not a known mutator)
    "history_default_argument": "history.losses.append(loss.detach())",
    "early_stopping_fit": "for epoch in range(max_epochs):",     # train() in its tensor loop
    "bfs_python_queue": ".tolist():",
    "makemore_sample_until_dot": "idx = torch.tensor([context[-model.block_size:]])",
    "char_rnn_classify": "return all_categories[category_i]",
    "time_sequence_lbfgs": "optimizer.step(closure)",
    "fgsm_test_loop": "data_grad = data.grad.data",              # backward after a tensor continue
    "predict_numpy_and_tolist": ".numpy()",
    "timed_step": "time.perf_counter()",
    "random_resized_crop": ".uniform_(log_ratio[0], log_ratio[1])",
    "group_by_label": "groups[int(y)].append(x)",
    "sorted_by_tensor_key": "sorted(list(dets), key=",
    "python_max_over_tensors": "min(range(len(val_losses)), key=",
    "dict_key_from_tensor_branch": "return {mode: x * 2}",
    "work_list_split": "while stack:",
    "list_argument_appended": "for score, idx in zip(",         # tuples appended in a loop
    "custom_optimizer_lion": "opt.step()",
    "dataloader_epoch_shuffled": "for x, y in loader:",        # RandomSampler's int(seed)
    "generator_batches": "yield X[i:i + bs], Y[i:i + bs]",      # a user generator
    # the caller's generator / count: refused before next() runs (outside_iterators.py)
    "infinite_loader_next": "x, y = next(data)",
    "itertools_count_warmup": "it = next(step_counter)",
}

NEEDLESS = {
}

BUGS = {
}


def _names_line(message, text):
    """The message names fresh_eyes_programs2.py and the line holding ``text``."""
    m = re.search(re.escape(programs.THIS_FILE) + r":(\d+)", message)
    assert m, f"fallback does not name the program's line: {message}"
    with open(programs.__file__) as f:
        line = f.read().splitlines()[int(m.group(1)) - 1]
    assert text in line, f"named line {m.group(1)} is {line.strip()!r}, not {text!r}"


def test_every_program_has_a_verdict():
    verdicts = CONVERTS + list(FALLS_BACK) + list(NEEDLESS) + list(BUGS)
    assert len(verdicts) == len(set(verdicts))
    assert set(verdicts) == set(PROGRAMS)


@pytest.mark.parametrize("name", CONVERTS)
def test_converts_and_equals_eager(name):
    fallbacks = run(PROGRAMS[name])
    assert not fallbacks, fallbacks[0]


@pytest.mark.parametrize("name", list(FALLS_BACK))
def test_falls_back_naming_its_line_and_equals_eager(name):
    fallbacks = run(PROGRAMS[name])
    assert fallbacks, "expected a FallbackWarning"
    _names_line(fallbacks[0], FALLS_BACK[name])
    torch.manual_seed(0)
    prog = PROGRAMS[name]()
    g = to_graph(prog.fn, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ConversionError) as err:
            g(*prog.inputs[0])
    _names_line(str(err.value), FALLS_BACK[name])


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=r))
                                  for n, r in NEEDLESS.items()])
def test_needless_fallback(name):
    fallbacks = run(PROGRAMS[name])
    assert not fallbacks, fallbacks[0]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=r))
                                  for n, r in BUGS.items()])
def test_silently_different_from_eager(name):
    run(PROGRAMS[name])
