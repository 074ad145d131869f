"""Ordinary tensor code that safe mode lets through, and the edge of what it allows.

Each test runs code a learner writes (the ``nn.Sequential(OrderedDict(...))``
idiom, ``functools.partial``, a sliding window, a ``TensorDataset``, a
``'{}'.format(x)``) in safe mode and checks the result against plain Python,
then shows that the dangerous neighbour of each allowance is still refused.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

from tensortrace.errors import PolicyError
from tensortrace.sandbox import SafeModeViolation, check_source, compile_safe, safe_globals
from tensortrace.scenario import loads_scenario
from tensortrace.errors import ScenarioError


def base() -> dict:
    return {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "np": np}


def both(source: str, *names: str) -> dict:
    """Run plain and safe; the named results must agree. Returns the safe namespace."""
    source = textwrap.dedent(source)
    assert check_source(source) == [], check_source(source)
    plain, safe = base(), safe_globals(base())
    torch.manual_seed(0)
    exec(compile(source, "<step>", "exec"), plain)
    torch.manual_seed(0)
    exec(compile_safe(source, "<step>"), safe)
    for name in names:
        p, s = plain[name], safe[name]
        if isinstance(p, (torch.Tensor, np.ndarray)):
            assert s.tolist() == p.tolist(), name
        else:
            assert s == p, name
    return safe


def refused_statically(source: str, *words: str) -> None:
    source = textwrap.dedent(source)
    message = " | ".join(r.message for r in check_source(source))
    assert message, f"not refused: {source!r}"
    for word in words:
        assert word in message, message
    with pytest.raises(PolicyError):
        compile_safe(source, "<step>")


def refused_at_run_time(source: str, *words: str) -> None:
    source = textwrap.dedent(source)
    assert check_source(source) == [], check_source(source)
    with pytest.raises(SafeModeViolation) as info:
        exec(compile_safe(source, "<step>"), safe_globals(base()))
    for word in words:
        assert word in str(info.value), str(info.value)


# -- collections ----------------------------------------------------------------


def test_ordered_dict_builds_a_sequential():
    ns = both(
        """
        from collections import OrderedDict
        net = nn.Sequential(OrderedDict([('lin', nn.Linear(2, 2)), ('act', nn.ReLU())]))
        names = [name for name, _ in net.named_children()]
        out = net(torch.ones(1, 2))
        """,
        "names",
        "out",
    )
    assert ns["names"] == ["lin", "act"]


def test_harmless_containers_of_collections_work():
    both(
        """
        import collections
        groups = collections.defaultdict(list)
        groups['a'].append(1)
        counts = collections.Counter('abca')
        window = collections.deque([1, 2, 3], maxlen=2)
        facts = (dict(groups), counts['a'], list(window), groups.default_factory is list)
        """,
        "facts",
    )


def test_the_rest_of_collections_stays_refused():
    # namedtuple generates source code and evaluates it.
    refused_statically("from collections import namedtuple", "collections.namedtuple")
    refused_statically("import collections.abc", "import collections.abc")
    refused_at_run_time(
        "import collections\nm = collections\nC = m.ChainMap", "collections.ChainMap"
    )


# -- functools ------------------------------------------------------------------


def test_functools_tools_work():
    both(
        """
        import functools
        from functools import partial, reduce
        add_one = partial(torch.add, other=1)
        total = reduce(lambda a, b: a + b, [torch.ones(2)] * 3)
        calls = []
        @functools.lru_cache(maxsize=None)
        def square(n):
            calls.append(n)
            return n * n
        squares = (square(3), square(3), len(calls))
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.act = partial(F.leaky_relu, negative_slope=0.5)
            @functools.cached_property
            def scale(self):
                return torch.tensor(2.)
            def forward(self, x):
                return self.act(x) * self.scale
        out = Model()(torch.tensor([-2., 2.]))
        plus = add_one(torch.zeros(2))
        """,
        "total",
        "squares",
        "out",
        "plus",
    )


def test_trusted_functools_objects_stay_readable_after_a_refusal_from_functools():
    # The K objects of cmp_to_key come from functools and are not among its
    # allowed names; refusing one must not spoil the verdict on partial.
    ns = safe_globals(base())
    source = textwrap.dedent(
        """
        import functools
        key = functools.cmp_to_key(lambda a, b: a - b)
        try:
            inner = key(3).obj
            refused = False
        except Exception:
            refused = True
        p = functools.partial(torch.add, other=1)
        f = p.func
        kw = p.keywords
        """
    )
    assert check_source(source) == []
    exec(compile_safe(source, "<step>"), ns)
    assert ns["refused"] and ns["f"] is torch.add and ns["kw"] == {"other": 1}


def test_functools_tools_that_rewrite_other_objects_stay_refused():
    # update_wrapper writes __name__ and __dict__ onto any object, here a
    # library function; total_ordering adds methods to any class.
    refused_statically(
        "import functools\nfunctools.update_wrapper(torch.add, len)", "functools.update_wrapper"
    )
    refused_statically("from functools import wraps", "functools.wraps")
    refused_statically(
        "import functools\nfunctools.total_ordering(torch.Size)", "functools.total_ordering"
    )


# -- numpy's sliding window ------------------------------------------------------------


def test_sliding_window_view_works():
    ns = both(
        """
        from numpy.lib.stride_tricks import sliding_window_view
        a = np.arange(6.)
        w = np.lib.stride_tricks.sliding_window_view(a, 3)
        w2 = sliding_window_view(a, 2)
        t = torch.from_numpy(w.copy())
        """,
        "w",
        "w2",
        "t",
    )
    assert ns["w"].shape == (4, 3)


def test_as_strided_stays_refused():
    refused_statically("v = np.lib.stride_tricks.as_strided(np.zeros(2), (1 << 30,))", "as_strided")
    refused_statically("from numpy.lib.stride_tricks import as_strided", "as_strided")
    refused_at_run_time("m = np.lib.stride_tricks\nf = m.as_strided", "as_strided")
    refused_at_run_time("m = np.lib\nio = m.npyio", "numpy.lib.npyio")


# -- datasets ------------------------------------------------------------------


def test_tensor_dataset_works():
    ns = both(
        """
        from torch.utils.data import TensorDataset
        ds = TensorDataset(torch.arange(4.), torch.arange(4) * 10)
        x, y = ds[2]
        n = len(ds)
        """,
        "x",
        "y",
        "n",
    )
    assert ns["n"] == 4 and ns["y"].item() == 20


def test_data_loader_stays_refused():
    refused_statically("from torch.utils.data import DataLoader", "torch.utils.data.DataLoader")
    refused_at_run_time("m = torch.utils.data\nL = m.DataLoader", "torch.utils.data.DataLoader")


# -- saved tensors ------------------------------------------------------------------


def test_raw_saved_tensors_of_a_grad_fn_are_readable():
    ns = both(
        """
        x = torch.ones(2, requires_grad=True)
        y = x.exp()
        raw = y.grad_fn._raw_saved_result
        kind = type(raw).__name__
        """,
        "kind",
    )
    assert ns["kind"] == "SavedTensor"


# -- str.format ------------------------------------------------------------------


def test_format_with_plain_fields_works():
    both(
        """
        x = torch.tensor([1.5])
        a = '{} and {:.2f}'.format(x.item(), 2.5)
        b = '{0}{0}'.format('ab')
        c = '{name!r:>8}'.format(name='w')
        fmt = 'loss={:.3f}'
        d = fmt.format(0.12345)
        e = '{v:{w}}'.format(v=3, w=5)
        f = '{a}'.format_map({'a': 1})
        """,
        "a",
        "b",
        "c",
        "d",
        "e",
        "f",
    )


def test_format_that_walks_attributes_or_items_stays_refused():
    refused_statically("s = '{0.__class__}'.format(1)", "'.format' with this template", "f-string")
    refused_statically("s = '{0[0]}'.format([1])", "'.format' with this template")
    refused_statically("s = '{x.real}'.format_map({'x': 1})", "'.format_map' with this template")
    # The template is built at run time: the guard looks at it then.
    refused_at_run_time(
        "fmt = '{0.__cl' + 'ass__}'\ns = fmt.format(1)", "'.format' with this template"
    )
    refused_at_run_time("fmt = '{:{0.real}}'\ns = fmt.format(1)", "'.format' with this template")
    # Through the class, the template is an argument the guards cannot see.
    refused_statically("s = str.format('{0.__class__}', 1)", "'str.format'")
    refused_at_run_time("S = str\ns = S.format('{0.__class__}', 1)", "a template it cannot see")


# -- YAML merge keys ------------------------------------------------------------------

MERGED = """\
title: merge keys
steps:
  - &base
    run: a = torch.ones(2)
    note: the shared note
  - <<: *base
    run: b = a + 1
  - <<: *base
"""


def test_yaml_merge_keys_share_fields_between_steps():
    scenario = loads_scenario(MERGED, "merged.yaml")
    first, second, third = scenario.steps
    assert second.note == "the shared note" and second.run.text.strip() == "b = a + 1"
    assert third.run.text.strip() == "a = torch.ones(2)"
    # A merged value keeps the line where it is written.
    assert third.run.line == 4 and second.run.line == 7


def test_yaml_merge_keys_keep_duplicate_detection():
    text = MERGED + "    run: c = 1\n    run: d = 2\n"
    with pytest.raises(ScenarioError) as info:
        loads_scenario(text, "merged.yaml")
    assert info.value.line == 10 and "duplicate key 'run' (first given on line 9)" in str(
        info.value
    )


def test_a_yaml_merge_key_must_name_a_mapping():
    text = "title: t\nsteps:\n  - <<: 5\n    run: a = 1\n"
    with pytest.raises(ScenarioError) as info:
        loads_scenario(text, "merged.yaml")
    assert info.value.line == 3 and "must name a mapping" in str(info.value)
