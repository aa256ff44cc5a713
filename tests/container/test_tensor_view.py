"""The tensor view's text and children (``container/rank/tensor_view.py``), and its place in both pydevds.

The end-to-end view through a real rank and DAP client is in test_tensor_view_e2e.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch

from remote_debug.container.rank import tensor_view as tv
from tests.container.test_tensor_view_e2e import TENSOR_CHILDREN
from tests.helpers.hook_runs import REPO


def _children(obj: object) -> dict[str, object]:
    return tv.TensorResolver().get_dictionary(obj)


# ----------------------------------------------------------------------------- the one line


@pytest.mark.parametrize(
    ("make", "line"),
    [
        (lambda: torch.zeros(64, 512), "Tensor[64, 512] float32 cpu"),
        (lambda: torch.nn.Parameter(torch.zeros(64, 512)), "Parameter[64, 512] float32 cpu requires_grad"),
        (lambda: torch.zeros(64, 512, requires_grad=True) * 2, "Tensor[64, 512] float32 cpu requires_grad"),
        (lambda: torch.zeros(3, 4, 5, dtype=torch.bfloat16).transpose(0, 2), "Tensor[5, 4, 3] bfloat16 cpu"),
        (lambda: torch.zeros(2**40, device="meta"), "Tensor[1099511627776] float32 meta"),  # no data behind it
        (lambda: torch.zeros(3, device="meta"), "Tensor[3] float32 meta"),  # tiny but not in CPU memory: no values
        (lambda: torch.eye(3).to_sparse(), "Tensor[3, 3] float32 cpu sparse_coo"),
        (lambda: torch.tensor([3.0]), "Tensor[1] float32 cpu = [3.]"),
        (lambda: torch.tensor(0.25), "Tensor[] float32 cpu = 0.25"),
        (lambda: torch.arange(4), "Tensor[4] int64 cpu = [0, 1, 2, 3]"),
        (lambda: torch.tensor([[True], [False]]), "Tensor[2, 1] bool cpu = [[True], [False]]"),
        (lambda: torch.ones(9), "Tensor[9] float32 cpu"),  # more than TINY_VALUES: metadata only
        (lambda: torch.nn.parameter.UninitializedParameter(), "UninitializedParameter[?] float32 cpu requires_grad"),
        (lambda: np.zeros((3, 4)), "ndarray[3, 4] float64"),
        (lambda: np.arange(3, dtype=np.int8), "ndarray[3] int8 = [0, 1, 2]"),
        (lambda: np.array(1.5), "ndarray[] float64 = 1.5"),
        (lambda: np.array(["a", "bc"]), "ndarray[2] <U2"),  # not numeric: no values
        (lambda: np.ma.masked_array(np.zeros(20)), "MaskedArray[20] float64"),
        (lambda: torch.zeros(1024).untyped_storage(), "UntypedStorage[4.0 KiB] cpu"),
    ],
)
def test_one_line(make: Any, line: str) -> None:
    assert tv.TensorText().get_str(make()) == line


def test_containers_of_tensors_show_their_tensors_one_line_each() -> None:
    text = tv.TensorText()
    x, y = torch.zeros(64, 512), torch.zeros(64, dtype=torch.long)
    assert text.get_str([x, 7, "a"]) == "list[3]: [Tensor[64, 512] float32 cpu, 7, 'a']"
    assert text.get_str((x,)) == "tuple[1]: (Tensor[64, 512] float32 cpu)"
    assert text.get_str({"x": x, "y": y}) == "dict[2]: {'x': Tensor[64, 512] float32 cpu, 'y': Tensor[64] int64 cpu}"
    assert text.get_str({"a": np.zeros(3), "n": None}) == "dict[2]: {'a': ndarray[3] float64 = [0., 0., 0.], 'n': None}"
    state = {f"layer{i}.weight": x for i in range(300)}  # a state_dict: the line stops growing, says how many more
    line = text.get_str(state)
    assert line is not None and line.startswith("dict[300]: {'layer0.weight': Tensor[64, 512] float32 cpu, ")
    assert len(line) < tv.LINE_CHARS + 60 and line.endswith(f", ... +{300 - line.count('Tensor[')}}}")


def test_other_containers_keep_pydevds_text() -> None:
    text = tv.TensorText()
    assert text.get_str([1, 2, 3]) is None and text.get_str({"a": 1}) is None and text.get_str(()) is None
    # only the first CONTAINER_PEEK items are looked at (pydevd's repr shows about as many): no big walks
    assert text.get_str([0] * tv.CONTAINER_PEEK + [torch.zeros(2)]) is None
    assert text.get_str(list(range(10**6))) is None


def test_clipboard_gets_the_real_repr() -> None:
    assert tv.TensorText().get_str_in_context(torch.zeros(2), "clipboard") is None  # pydevd's own: the repr
    assert tv.TensorText().get_str_in_context(torch.zeros(2), "hover") == "Tensor[2] float32 cpu = [0., 0.]"


# ----------------------------------------------------------------------------- children


def test_tensor_children_put_the_summary_first() -> None:
    weight = torch.nn.Parameter(torch.zeros(64, 512))
    weight.grad = torch.ones(64, 512)
    rows = tv.TensorResolver().get_contents_debug_adapter_protocol(weight)
    assert [name for name, _, _ in rows] == TENSOR_CHILDREN
    values = {name: value for name, value, _ in rows}
    assert (values["shape"], values["strides"], values["bytes"]) == ("[64, 512]", "[512, 1]", "128.0 KiB (131,072 B)")
    assert type(values["shape"]) is tv.Fact  # a leaf in pydevd, shown without quotes
    assert values["grad"] is weight.grad  # the gradient tensor itself, shown with the same view
    assert tv.one_line(values["grad"]) == "Tensor[64, 512] float32 cpu"
    # the expressions "Add to Watch" evaluates (pydevd appends them to the variable's own)
    assert {name: suffix for name, _, suffix in rows}["strides"] == ".stride()"


def test_a_non_leafs_children_read_no_grad() -> None:
    """``.grad`` of a non-leaf is None and reading it warns into the rank's output: not listed."""
    y = torch.zeros(3, requires_grad=True) * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        children = _children(y)
    assert "grad" not in children and str(children["grad_fn"]).startswith("<MulBackward0")
    assert children["is_leaf"] is False


def test_sparse_and_array_and_storage_children() -> None:
    sparse = _children(torch.eye(3).to_sparse())
    assert sparse["layout"] == "sparse_coo" and sparse["stored values"] == 3 and "strides" not in sparse
    array = _children(np.zeros((3, 4), order="F"))
    assert list(array)[:7] == ["shape", "dtype", "strides", "contiguous", "size", "bytes", "is_view"]
    assert (array["strides"], array["contiguous"], array["bytes"]) == ("[8, 24] bytes", False, "96 B")
    storage = _children(torch.zeros(256).untyped_storage())
    assert list(storage) == ["bytes", "device", "attributes"] and storage["bytes"] == "1.0 KiB (1,024 B)"


def test_attributes_child_gives_pydevds_own_children() -> None:
    class Stock:
        def get_dictionary(self, obj: object) -> dict[str, object]:
            return {"T": "transposed"}

        def resolve(self, obj: object, attribute: str) -> object:
            return f"resolved {attribute}"

    resolver = tv.TensorResolver(Stock())
    attributes = resolver.get_dictionary(torch.zeros(2))["attributes"]
    assert tv.one_line(attributes) == "every attribute, as the debugger lists them (expand)"
    assert resolver.get_dictionary(attributes) == {"T": "transposed"}
    assert resolver.resolve(attributes, "T") == "resolved T"  # pydevd-pycharm walks down by name


# ----------------------------------------------------------------------------- statistics


def test_statistics_of_a_small_tensor_are_exact() -> None:
    t = torch.tensor([[1.0, float("nan")], [float("inf"), -2.0]])
    stats = tv.Statistics(t)
    assert tv.one_line(stats) == "min, max, mean, NaNs of all 4 elements (expand to compute)"
    figures = _children(stats)
    assert figures["NaNs"] == 1 and figures["infs"] == 1 and figures["over"] == "all 4 elements"
    assert figures["[0, :10]"] == "[1., nan]"
    plain = _children(tv.Statistics(torch.arange(10, dtype=torch.int32).reshape(2, 5)))
    assert (plain["min"], plain["max"], plain["mean"]) == (0, 9, 4.5) and "NaNs" not in plain
    assert _children(tv.Statistics(np.array([1.0, 3.0])))["mean"] == 2.0


def test_statistics_of_a_big_tensor_read_a_bounded_strided_view() -> None:
    t = torch.ones(4096, 2048)  # 8,388,608 elements: 8x the cap
    index, count = tv.strided_sample(tuple(t.shape), tv.STATS_ELEMENTS)
    assert count <= tv.STATS_ELEMENTS and index[0].step == 8
    assert t[index].data_ptr() == t.data_ptr()  # a view of the tensor: nothing copied to sample it
    figures = _children(tv.Statistics(t))
    assert figures["over"] == "1,048,576 of 8,388,608 elements, [::8]"
    assert (figures["min"], figures["max"], figures["mean"], figures["NaNs"]) == (1.0, 1.0, 1.0, 0)
    assert figures["[0, :10]"] == "[" + ", ".join(["1."] * 10) + "]"


@pytest.mark.parametrize(
    ("shape", "cap"),
    [((10**9,), 1 << 20), ((1, 3, 1 << 30), 1 << 20), ((7, 11, 13, 17), 100), ((5,), 1 << 20), ((3, 0, 4), 10)],
)
def test_the_sample_stays_near_the_cap(shape: tuple[int, ...], cap: int) -> None:
    index, count = tv.strided_sample(shape, cap)
    sampled = 1
    for size, part in zip(shape, index, strict=True):
        sampled *= len(range(size)[part])
    assert sampled == count <= 2 * cap


def test_statistics_are_not_computed_where_they_cannot_or_must_not_be() -> None:
    assert _children(tv.Statistics(torch.zeros(3, device="meta"))) == {"not computed": "a meta tensor has no data"}
    assert "not computed" in _children(tv.Statistics(np.array(["a"])))

    class Distributed(torch.Tensor):  # stands in for DTensor: its ops may be collectives
        pass

    sub = torch.zeros(4).as_subclass(Distributed)
    assert tv.one_line(sub) == "Distributed[4] float32 cpu"  # metadata, no values either
    assert "tensor subclass" in str(_children(tv.Statistics(sub))["not computed"])
    complex_ = _children(tv.Statistics(torch.ones(2, dtype=torch.complex64)))
    assert str(complex_["min"]).startswith("n/a: ") and complex_["mean"] == 1 + 0j  # one figure fails, not all


# ----------------------------------------------------------------------------- metadata only, never raises


def test_the_line_and_the_children_read_metadata_only() -> None:
    """What the pane shows without a click runs no op that reads the data (no copy, no sync on a GPU)."""
    seen: list[str] = []

    class Spy(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(getattr(func, "__name__", str(func)))
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))

    spy = torch.ones(4).as_subclass(Spy).requires_grad_()
    tv.one_line(spy)
    _children(spy)
    tv.one_line([spy])
    reading = {"tolist", "item", "__repr__", "__format__", "cpu", "to", "numpy", "min", "max", "sum", "__getitem__"}
    assert seen and not reading & set(seen), seen


def test_odd_objects_never_raise() -> None:
    text, resolver = tv.TensorText(), tv.TensorResolver()
    impostor = mock.Mock(spec=torch.Tensor)  # its __class__ says Tensor, as pydevd sees it
    assert text.get_str(impostor) is None and resolver.get_dictionary(impostor) == {}

    class Broken(torch.Tensor):  # every operation and attribute read raises, as a half-built subclass may
        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            raise RuntimeError("broken")

    broken = torch.zeros(2).as_subclass(Broken)
    assert text.get_str(broken) == "Broken[?] ? ?"  # what could not be read is a "?", never an error
    assert resolver.get_dictionary(broken)["shape"] == "[?]"
    assert "not computed" in resolver.get_dictionary(tv.Statistics(broken))
    for odd in ("Unable to get Type", None, 3, mock.Mock()):
        assert resolver.can_provide(odd, "x") is False and text.can_provide(odd, "x") is False
    assert resolver.resolve(torch.zeros(2), "no such child") is None


def test_nothing_is_ours_without_torch_or_numpy_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    t, a = torch.zeros(2), np.zeros(2)
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.delitem(sys.modules, "numpy")
    text = tv.TensorText()
    assert text.get_str(t) is None and text.get_str(a) is None and text.get_str([t]) is None
    assert not tv.TensorResolver().can_provide(type(t), "Tensor")


def test_importing_the_view_imports_neither_torch_nor_numpy() -> None:
    code = (
        "import sys; from remote_debug.container.rank import tensor_view as tv\n"
        "assert tv.TensorText().get_str([1, {'a': 2}]) is None\n"
        "print('torch' in sys.modules, 'numpy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]


# ----------------------------------------------------------------------------- installed into each pydevd

# Each pydevd in a process of its own: debugpy's vendored one and pydevd-pycharm cannot share one.
DEBUGPY_PROBE = textwrap.dedent(
    """
    import json, sys
    import debugpy.server  # loads debugpy's pydevd, as the rank agent does before listen()
    import torch
    from remote_debug.container.rank import tensor_view as tv
    from _pydevd_bundle import pydevd_extension_api as api, pydevd_extension_utils as utils, pydevd_xml
    installed = [tv.install(), tv.install()]
    resolvers = utils.extensions_of_type(api.TypeResolveProvider)
    t = torch.zeros(64, 512)
    _name, _qualifier, _error, resolver, value = pydevd_xml.get_variable_details(t)
    print(json.dumps({
        "installed": installed,
        "ours_first": type(resolvers[0]).__name__,
        "ours_count": sum(type(r).__name__ == "TensorResolver" for r in resolvers),
        "value": value,
        "array": pydevd_xml.get_variable_details(__import__("numpy").zeros((3, 4)))[-1],
        "children": [name for name, _, _ in resolver.get_contents_debug_adapter_protocol(t)][:3],
    }))
    """
)

PYCHARM_PROBE = textwrap.dedent(
    """
    import json, sys
    from urllib.parse import unquote
    import pydevd  # pydevd-pycharm, as pycharm_rank.settrace imports it
    import torch
    from remote_debug.container.rank import tensor_view as tv
    from _pydevd_bundle import pydevd_vars, pydevd_xml
    assert "debugpy" not in sys.modules
    t = torch.zeros(64, 512)
    pydevd_xml.var_to_xml(t, "t")  # pydevd shows it before install: its choice of provider is cached
    print(json.dumps({
        "installed": tv.install(),
        "xml": unquote(pydevd_xml.var_to_xml(t, "t")),
        "children": list(pydevd_vars.resolve_compound_var_object_fields(t, "statistics") or {})[:3],
        "top": list(pydevd_xml.get_type(t)[2].get_dictionary(t))[:3],
    }))
    """
)


def _probe(code: str, **env: str) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_DEBUG_")}
    environ.update(PYTHONPATH=str(REPO), PYDEVD_DISABLE_FILE_VALIDATION="1", **env)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=environ, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_install_puts_the_view_first_in_debugpys_pydevd() -> None:
    result = _probe(DEBUGPY_PROBE)
    assert result["installed"] == [True, True] and result["ours_count"] == 1  # a second install changes nothing
    assert result["ours_first"] == "TensorResolver"  # ahead of pydevd's own numpy provider
    assert result["value"] == "Tensor[64, 512] float32 cpu"
    assert result["array"] == "ndarray[3, 4] float64"
    assert result["children"] == ["shape", "dtype", "device"]


def test_install_can_be_turned_off() -> None:
    result = _probe(DEBUGPY_PROBE, REMOTE_DEBUG_TENSOR_VIEW="0")
    assert result["installed"] == [False, False] and result["ours_count"] == 0
    assert result["value"].startswith("Tensor: tensor([[")  # pydevd's own: the repr


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("pydevd_pycharm") is None, reason="pydevd-pycharm is not installed"
)
def test_install_works_in_pydevd_pycharm_and_forgets_what_it_chose_before() -> None:
    """Installed after pydevd-pycharm already showed a tensor (cached its choice): ours from then on."""
    result = _probe(PYCHARM_PROBE)
    assert result["installed"] is True
    assert 'value="Tensor[64, 512] float32 cpu"' in result["xml"] and 'shape="(64, 512)"' in result["xml"]
    assert result["children"] == ["min", "max", "mean"]  # PyCharm expands "statistics" by walking down by name
    assert result["top"] == ["shape", "dtype", "device"]
