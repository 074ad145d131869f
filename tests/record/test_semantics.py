"""The classic cases: what the trace reports must be what PyTorch does."""

from __future__ import annotations

import pytest

from conftest import state, step_of


def test_clone_gets_new_storage_and_gradient_accumulates_into_source(trace_yaml):
    t = trace_yaml(
        """
        title: clone
        steps:
          - a = torch.tensor([1., 2., 3.], requires_grad=True)
          - b = a.clone()
          - (a * 2).sum().backward()
          - (b * 3).sum().backward()
        """
    )
    s2 = step_of(t, 2)
    a, b = state(s2, "a"), state(s2, "b")
    assert a.storage != b.storage
    assert b.grad_fn == "CloneBackward0"
    assert b.is_leaf is False and a.is_leaf is True
    assert b.requires_grad is True
    assert state(step_of(t, 3), "a").grad.data == (2.0, 2.0, 2.0)
    assert state(step_of(t, 4), "a").grad.data == (5.0, 5.0, 5.0)  # accumulated through the clone
    assert state(step_of(t, 4), "b").grad is None  # a non-leaf keeps no .grad
    assert t.passed


def test_copy_into_empty_like_is_recorded_as_copy_backwards(trace_yaml):
    t = trace_yaml(
        """
        title: copy_
        steps:
          - a = torch.tensor([1., 2.], requires_grad=True)
          - b = torch.empty_like(a).copy_(a)
        """
    )
    a, b = state(step_of(t, 2), "a"), state(step_of(t, 2), "b")
    assert b.grad_fn == "CopyBackwards"
    assert a.storage != b.storage
    assert b.values.data == (1.0, 2.0)


def test_detach_shares_storage_and_version_counter(trace_yaml):
    t = trace_yaml(
        """
        title: detach
        steps:
          - a = torch.tensor([1., 2., 3.], requires_grad=True)
          - b = a.detach()
          - b.zero_()
        """
    )
    a, b = state(step_of(t, 2), "a"), state(step_of(t, 2), "b")
    assert a.storage == b.storage and a.storage_ptr == b.storage_ptr
    assert b.requires_grad is False and b.is_leaf is True and b.grad_fn is None
    a3, b3 = state(step_of(t, 3), "a"), state(step_of(t, 3), "b")
    assert a3.values.data == (0.0, 0.0, 0.0)
    assert a3.version == 1 and b3.version == 1  # one counter, shared


def test_data_has_own_version_counter_and_backward_is_silently_wrong(trace_yaml):
    t = trace_yaml(
        """
        title: .data
        steps:
          - x = torch.tensor([1., 2., 3.], requires_grad=True)
          - y = x.sigmoid()
          - z = y.data
          - z.zero_()
          - y.sum().backward()
        """
    )
    y3, z3 = state(step_of(t, 3), "y"), state(step_of(t, 3), "z")
    assert y3.storage == z3.storage
    y4, z4 = state(step_of(t, 4), "y"), state(step_of(t, 4), "z")
    assert z4.version == 1 and y4.version == 0  # the change did not reach y's counter
    s5 = step_of(t, 5)
    assert s5.status == "ok"  # autograd did not notice
    # sigmoid's gradient is y * (1 - y); y now reads 0, so the gradient is 0: wrong
    assert state(s5, "x").grad.data == (0.0, 0.0, 0.0)


def test_detach_through_alias_makes_backward_fail_and_later_steps_still_run(trace_yaml):
    t = trace_yaml(
        """
        title: detach then in-place
        steps:
          - x = torch.tensor([1., 2., 3.], requires_grad=True)
          - y = x.sigmoid()
          - y.detach().zero_()
          - y.sum().backward()
          - after = 1 + torch.ones(1)
        """
    )
    s4 = step_of(t, 4)
    assert s4.status == "raised"
    assert s4.error.type == "RuntimeError"
    assert "modified by an inplace operation" in s4.error.message
    assert s4.error.explanation is not None and s4.error.explanation.topic == "inplace-saved-tensor"
    # PyTorch says "[torch.FloatTensor [3]], which is output 0 of Sigmoid"; the trace names it
    assert (
        "In this scenario that is `y` (storage S2), saved at version 0 and now at version 1."
        in s4.error.explanation.what
    )
    assert s4.behaved is False and t.passed is False
    assert state(step_of(t, 5), "after").values.data == (2.0,)
    assert state(step_of(t, 5), "x").grad is None


def test_detach_inplace_turns_a_non_leaf_into_a_leaf_and_refuses_views(trace_yaml):
    t = trace_yaml(
        """
        title: detach_
        steps:
          - a = torch.tensor([1., 2.], requires_grad=True)
          - b = a * 2
          - b.detach_()
          - v = (a * 3)[:1]
          - run: v.detach_()
            raises: RuntimeError
        """
    )
    before, after = state(step_of(t, 2), "b"), state(step_of(t, 3), "b")
    assert before.is_leaf is False and before.grad_fn == "MulBackward0"
    assert after.is_leaf is True and after.grad_fn is None and after.requires_grad is False
    s5 = step_of(t, 5)
    assert s5.status == "raised" and "view" in s5.error.message
    assert s5.behaved and t.passed


def test_detached_tensor_made_to_require_grad_is_its_own_leaf(trace_yaml):
    t = trace_yaml(
        """
        title: detach + requires_grad_
        steps:
          - a = torch.tensor([1., 2.], requires_grad=True)
          - b = a.detach()
          - b.requires_grad_()
          - (b * 4).sum().backward()
        """
    )
    b3 = state(step_of(t, 3), "b")
    assert b3.is_leaf and b3.requires_grad and b3.grad_fn is None
    s4 = step_of(t, 4)
    assert state(s4, "b").grad.data == (4.0, 4.0)
    assert state(s4, "a").grad is None


def test_backward_twice_fails_unless_the_graph_is_retained(trace_yaml):
    t = trace_yaml(
        """
        title: backward twice
        steps:
          - x = torch.tensor([1., 2.], requires_grad=True)
          - y = (x * x).sum()
          - y.backward()
          - run: y.backward()
            raises: {type: RuntimeError, match: second time}
          - z = (x * x).sum()
          - z.backward(retain_graph=True)
          - z.backward()
        """
    )
    assert (
        step_of(t, 4).status == "raised"
        and step_of(t, 4).error.explanation.topic == "backward-twice"
    )
    assert state(step_of(t, 3), "x").grad.data == (2.0, 4.0)
    assert state(step_of(t, 7), "x").grad.data == (6.0, 12.0)  # 2x once + 2x twice more
    assert t.passed


def test_views_share_storage_with_offsets_and_strides(trace_yaml):
    t = trace_yaml(
        """
        title: views
        steps:
          - a = torch.arange(6.)
          - s = a[2:]
          - v = a.view(2, 3)
          - tr = v.t()
          - e = torch.tensor([1.]).expand(4)
        """
    )
    last = step_of(t, 5)
    a, s, v, tr, e = (state(last, n) for n in ("a", "s", "v", "tr", "e"))
    assert a.storage == s.storage == v.storage == tr.storage
    assert s.storage_offset == 2 and s.is_view and s.base == "a"
    assert v.shape == (2, 3) and v.stride == (3, 1)
    assert tr.shape == (3, 2) and tr.stride == (1, 3)
    assert e.stride == (0,) and e.shape == (4,) and e.storage_nbytes == 4
    assert a.is_view is False and a.base is None


def test_numpy_and_from_numpy_share_memory(trace_yaml):
    t = trace_yaml(
        """
        title: numpy
        setup: import numpy as np
        steps:
          - a = torch.zeros(3)
          - n = a.numpy()
          - n[0] = 5
          - m = np.ones(2)
          - b = torch.from_numpy(m)
          - b.add_(1)
        """
    )
    s3 = step_of(t, 3)
    assert state(s3, "a").values.data == (5.0, 0.0, 0.0)
    assert state(s3, "n").storage == state(s3, "a").storage
    assert state(s3, "n").kind == "ndarray" and state(s3, "n").is_view  # it does not own its memory
    s6 = step_of(t, 6)
    assert state(s6, "b").storage == state(s6, "m").storage
    assert state(s6, "m").values.data == (2.0, 2.0)


def test_torch_tensor_of_a_tensor_copies_and_warns(trace_yaml):
    t = trace_yaml(
        """
        title: torch.tensor(t)
        steps:
          - a = torch.ones(2)
          - run: b = torch.tensor(a)
            warns: {type: UserWarning, match: clone}
        """
    )
    s2 = step_of(t, 2)
    assert state(s2, "a").storage != state(s2, "b").storage
    assert [w.category for w in s2.warnings] == ["UserWarning"]
    assert s2.warnings[0].line == 4
    assert t.passed


def test_reading_a_non_leaf_grad_does_not_add_its_warning(trace_yaml):
    t = trace_yaml(
        """
        title: non-leaf grad
        steps:
          - x = torch.ones(2, requires_grad=True)
          - y = x * 2
          - y.sum().backward()
          - g = y.grad
        """
    )
    assert step_of(t, 3).warnings == ()  # the tracer read y.grad after step 3: no warning recorded
    assert len(step_of(t, 4).warnings) == 1  # the step itself read it: the user sees the warning
    assert "not a leaf" in step_of(t, 4).warnings[0].message
    assert state(step_of(t, 3), "y").retains_grad is False


def test_reference_assignment_is_the_same_object(trace_yaml):
    t = trace_yaml(
        """
        title: b = a
        steps:
          - a = torch.ones(2)
          - b = a
          - b.add_(1)
        """
    )
    s3 = step_of(t, 3)
    assert state(s3, "b").same_as == "a"
    assert state(s3, "a").values.data == (2.0, 2.0)


def test_module_parameters_and_containers_are_named(trace_yaml):
    t = trace_yaml(
        """
        title: names
        steps:
          - lin = nn.Linear(2, 1)
          - xs = [torch.ones(1), torch.zeros(1)]
          - "d = {'k': torch.ones(1)}"
          - bn = nn.BatchNorm1d(1)
        """
    )
    names = [s.name for s in step_of(t, 4).tensors]
    assert names[:5] == ["lin.weight", "lin.bias", "xs[0]", "xs[1]", "d['k']"]
    assert state(step_of(t, 4), "lin.weight").kind == "parameter"
    assert state(step_of(t, 4), "bn.running_mean").kind == "buffer"


def test_storage_label_is_not_reused_when_the_address_is(trace_yaml):
    t = trace_yaml(
        """
        title: address reuse
        steps:
          - a = torch.ones(1000)
          - del a
          - b = torch.ones(1000)
        """
    )
    a, b = state(step_of(t, 1), "a"), state(step_of(t, 3), "b")
    assert a.storage == "S1" and b.storage == "S2"
    assert [s.label for s in t.storages] == ["S1", "S2"]


def test_large_tensor_is_summarised(trace_yaml):
    t = trace_yaml(
        """
        title: big
        steps:
          - a = torch.arange(1000.)
          - a[3] = float('nan')
          - a[4] = float('inf')
        """
    )
    v = state(step_of(t, 3), "a").values
    assert v.kind == "summary"
    s = v.summary
    assert s.numel == 1000 and s.nan_count == 1 and s.inf_count == 1
    assert s.min == 0.0 and s.max == 999.0
    finite = [float(i) for i in range(1000) if i not in (3, 4)]
    mean = sum(finite) / len(finite)
    assert abs(s.mean - mean) < 1e-9
    std = (sum((x - mean) ** 2 for x in finite) / (len(finite) - 1)) ** 0.5
    assert abs(s.std - std) < 1e-6
    assert s.head == (0.0, 1.0, 2.0, "nan", "inf", 5.0, 6.0, 7.0)


def test_expectations_show_both_sides_of_a_failed_comparison(trace_yaml):
    t = trace_yaml(
        """
        title: expectations
        steps:
          - run: a = torch.ones(2)
            expect:
              - a.tolist() == [1., 2.]
              - a.sum().item() == 2
              - a > 0
              - None.tolist()
              - a.requires_grad
        """
    )
    e = step_of(t, 1).expectations
    assert e[4].passed is False and e[4].value == "False" and e[4].op is None
    assert (
        e[0].passed is False
        and e[0].op == "=="
        and e[0].left == "[1.0, 1.0]"
        and e[0].right == "[1.0, 2.0]"
    )
    assert e[1].passed is True
    assert e[2].passed is False and "ambiguous" in e[2].error
    assert e[3].passed is False and e[3].error.startswith("AttributeError")
    assert step_of(t, 1).failures == tuple(
        f"expectation failed: {x.expr}" for x in (e[0], e[2], e[3], e[4])
    )


def test_expectations_run_even_when_the_step_raised(trace_yaml):
    t = trace_yaml(
        """
        title: failed backward
        steps:
          - a = torch.ones(2, requires_grad=True)
          - run: >-
              a.sum().backward(); a.sum().backward();
              (a * a).sum().backward(); (a * a).sum().backward(); a.add_(1)
            raises: RuntimeError
            expect:
              - a.grad.tolist() == [6., 6.]
        """
    )
    s = step_of(t, 2)
    assert s.status == "raised" and s.behaved
    assert "leaf Variable" in s.error.message


def test_declared_exception_matches_base_classes_and_dotted_names(trace_yaml):
    t = trace_yaml(
        """
        title: raises
        steps:
          - run: "[][1]"
            raises: LookupError
          - run: "{}['x']"
            raises: builtins.KeyError
          - run: x = 1
            raises: Exception
          - run: "1/0"
            raises: {type: ZeroDivisionError, match: "^nope"}
        """
    )
    assert [s.behaved for s in t.steps] == [True, True, False, False]
    assert t.steps[2].failures == ("expected Exception, but nothing was raised",)
    assert "expected ZeroDivisionError matching '^nope'" in t.steps[3].failures[0]


def test_partial_step_keeps_names_bound_before_the_error(trace_yaml):
    t = trace_yaml(
        """
        title: partial
        steps:
          - run: |
              a = torch.ones(1)
              b = a / undefined_name
              c = 3
            raises: NameError
        """
    )
    s = step_of(t, 1)
    assert [x.name for x in s.tensors] == ["a"]
    assert s.error.line == 5  # the line in the file where the error happened


@pytest.mark.parametrize("safe", [True, False])
def test_a_repeated_step_text_reports_the_line_of_its_own_step(trace_yaml, safe):
    """Steps with the same text share one compiled code object, re-labelled per
    step: an error inside a function the second copy defines names its own line."""
    t = trace_yaml(
        """
        title: repeated text
        steps:
          - run: |
              f = lambda: undefined_name
              f()
            raises: NameError
          - run: |
              f = lambda: undefined_name
              f()
            raises: NameError
        """,
        safe=safe,
    )
    assert [step_of(t, i).error.line for i in (1, 2)] == [4, 8]
    assert all(step_of(t, i).raised_as_declared for i in (1, 2))


def test_step_output_is_recorded(trace_yaml):
    t = trace_yaml(
        """
        title: print
        steps:
          - print('hello', 1 + 1)
        """
    )
    assert step_of(t, 1).stdout == "hello 2\n"


def test_failing_setup_fails_the_scenario_and_runs_no_step(trace_yaml):
    t = trace_yaml(
        """
        title: setup fails
        setup: x = 1 / 0
        steps:
          - a = torch.ones(1)
        """
    )
    assert t.setup.status == "raised" and t.steps == () and not t.passed
    assert t.aborted == "setup failed; no step ran"


def test_seed_makes_random_values_reproducible(trace_yaml):
    first = trace_yaml("title: r\nseed: 3\nsteps:\n  - a = torch.rand(2)\n")
    second = trace_yaml("title: r\nseed: 3\nsteps:\n  - a = torch.rand(2)\n")
    assert state(first.steps[0], "a").values == state(second.steps[0], "a").values


def test_global_torch_state_is_reset_between_scenarios(trace_yaml):
    trace_yaml(
        "title: s\nsteps:\n  - torch.set_default_dtype(torch.float64)\n  -"
        " torch.set_grad_enabled(False)\n"
    )
    t = trace_yaml("title: s\nsteps:\n  - a = torch.ones(1, requires_grad=True) * 2\n")
    a = state(t.steps[0], "a")
    assert a.dtype == "float32" and a.grad_fn == "MulBackward0"


def test_show_and_graph_names_never_bound_get_a_notice(trace_yaml):
    t = trace_yaml(
        """
        title: notices
        show: [a, ghost]
        steps:
          - a = torch.ones(1)
          - run: b = a * 2
            graph: [b, phantom]
        """
    )
    assert step_of(t, 2).shown == ("a",)
    assert any("'ghost'" in n for n in t.notices)
    assert any("'phantom'" in n for n in t.notices)


def test_graph_records_nodes_edges_and_leaf_names(trace_yaml):
    t = trace_yaml(
        """
        title: graph
        steps:
          - x = torch.ones(2, requires_grad=True)
          - w = torch.ones(2, requires_grad=True)
          - run: y = (x * w + x).sum()
            graph: [y]
          - run: z = torch.ones(1)
            graph: true
        """
    )
    (g,) = step_of(t, 3).graphs
    names = {n.id: n for n in g.nodes}
    root = names[g.root]
    assert root.name == "SumBackward0"
    add = names[root.next[0]]
    assert add.name == "AddBackward0"
    leaves = sorted(n.leaf for n in g.nodes if n.name == "AccumulateGrad")
    assert leaves == ["w", "x"]  # x is reached twice but appears once
    assert len([n for n in g.nodes if n.leaf == "x"]) == 1
    assert (
        step_of(t, 4).graphs == (step_of(t, 4).graphs[0],) and step_of(t, 4).graphs[0].tensor == "y"
    )


def test_a_fifty_thousand_op_chain_is_walked_without_recursion(trace_yaml):
    t = trace_yaml(
        """
        title: long chain
        steps:
          - run: |
              x = torch.ones(1, requires_grad=True)
              y = x
              for _ in range(50000):
                  y = y * 1.0 + 1.0
            graph: [y]
        """,
    )
    (g,) = t.steps[0].graphs
    assert len(g.nodes) == 100_001
    assert g.nodes[-1].name == "AccumulateGrad" and g.nodes[-1].leaf == "x"
    assert not g.truncated


def test_an_ambiguous_saved_tensor_is_not_named(trace_yaml):
    t = trace_yaml(
        """
        title: two candidates
        steps:
          - x = torch.ones(3, requires_grad=True)
          - y1 = x.sigmoid()
          - y2 = x.sigmoid()
          - y1.detach().zero_()
          - y2.detach().zero_()
          - run: (y1 + y2).sum().backward()
            raises: RuntimeError
        """
    )
    assert "In this scenario" not in step_of(t, 6).error.explanation.what
