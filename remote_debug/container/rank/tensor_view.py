"""Tensors at a glance: how a rank's debugger shows torch tensors, numpy arrays, storages and containers of them.

Stock pydevd shows a tensor as its ``repr`` (for a CUDA tensor: a device sync and a copy to the host) and,
when expanded, every attribute ``dir()`` lists, each one ``repr``'d (``shape`` is the 39th child).  Here a
tensor is one line of metadata::

    Tensor[64, 512] float32 cuda:0 requires_grad
    Parameter[512] float32 cuda:0 requires_grad
    ndarray[3, 4] float64
    Tensor[1] float32 cpu = [3.]          (a CPU tensor of at most TINY_VALUES elements: its values)
    list[3]: [Tensor[64, 512] float32 cpu, Tensor[512] float32 cpu, 7]
    UntypedStorage[1.0 GiB] cpu           (stock: a repr listing every byte, debugpy#1660)

and its children start with what an ML engineer looks for: shape, dtype, device, strides, contiguity,
numel, bytes, requires_grad, is_leaf, grad_fn, grad (the gradient, shown the same way), then
``statistics`` (min/max/mean/NaN and inf counts and the first values) computed only when that child is
expanded, then ``attributes`` (stock pydevd's children, on demand).

Nothing here copies a tensor to the host or synchronises the GPU except the ``statistics`` child when it is
expanded, and that is bounded: at most STATS_ELEMENTS elements (the whole tensor when it is that small,
else a strided view of it: every k-th index along the leading dimensions, no copy), computed where the
tensor lives, with only the few result scalars and FIRST_VALUES values copied back.  The one line reads
metadata only (shape, dtype, device, layout, requires_grad); its values part reads at most TINY_VALUES
elements, and only from CPU memory.  Tensor subclasses (DTensor, fake/functional tensors) get the one line
and the metadata but no statistics: their operations may run collectives or user code.

torch and numpy are never imported here: an object is ours only when its type is a subclass of the
``torch.Tensor`` / ``numpy.ndarray`` already in ``sys.modules`` (a process without them pays one dict
lookup per variable type).  Every entry point pydevd calls catches everything: a presenter must never
raise into a rank; on a failure pydevd's own presentation applies (``None`` from ``get_str``).

How it is loaded: :func:`install`, called by the rank agent right after it imports the debugger
(``agent.py`` before ``debugpy.listen``, ``pycharm_rank.py`` before ``settrace``), puts our two providers
first in the lists pydevd's extension manager hands out (``extensions_of_type(TypeResolveProvider)`` and
``(StrPresentationProvider)``).  Those lists are the very objects pydevd's ``TypeResolveHandler`` keeps,
and pydevd consults them lazily, at the first variable it shows, so inserting into them before any
debugger can connect makes ours win over pydevd's own numpy provider, in debugpy's vendored pydevd and in
pydevd-pycharm alike (the same API in both).  Not chosen: shipping a ``pydevd_plugins/extensions/...``
module in our wheel for pydevd to discover by scanning ``sys.path``.  Both pydevds declare
``pydevd_plugins`` a pkgutil namespace (``extend_path``), so it would be found, but pydevd-pycharm installs
``pydevd_plugins/__init__.py`` into the same site-packages: our wheel would then write into, or remove
with its uninstall, another distribution's package directory; and bundles that carry only
``remote_debug`` (an adopted process's ``sys.path``) would not have it at all.  Registration from the
agent works wherever the agent runs, and ``REMOTE_DEBUG_TENSOR_VIEW=0`` leaves pydevd's presentation as
it is.
"""

from __future__ import annotations

import collections
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from remote_debug.container.log import describe, log
from remote_debug.contract.spec import ENV_TENSOR_VIEW

TINY_VALUES = 8  # a CPU tensor/array of at most this many elements shows them in its one line
STATS_ELEMENTS = 1 << 20  # statistics read at most about this many elements (1,048,576: 4 MiB of float32)
FIRST_VALUES = 10  # values listed under "statistics"
CONTAINER_PEEK = 16  # the items of a list/tuple/dict looked at for tensors (pydevd's repr shows ~15)
LINE_CHARS = 300  # a container's one line stops growing here
_TEXT_CHARS = 40  # a str item in a container's line

Child = tuple[str, object, str | None]  # (name, value, evaluate-name suffix) as pydevd's DAP side wants


class Fact(str):
    """A child's text shown as it is: pydevd treats a ``str`` as a leaf, and our str provider drops the quotes."""

    __slots__ = ()


class Statistics:
    """The ``statistics`` child of a tensor/array: computed only when expanded (bounded, see the module)."""

    __slots__ = ("target",)

    def __init__(self, target: object) -> None:
        self.target = target


class Attributes:
    """The ``attributes`` child: pydevd's own children of the tensor/array (every ``dir()`` entry), on demand."""

    __slots__ = ("target",)

    def __init__(self, target: object) -> None:
        self.target = target


# ----------------------------------------------------------------------------- what is ours


def _torch() -> Any:
    return sys.modules.get("torch")


def _numpy() -> Any:
    return sys.modules.get("numpy")


def _subclass(type_object: object, module: Any, name: str) -> bool:
    base = getattr(module, name, None) if module is not None else None
    try:
        return isinstance(base, type) and isinstance(type_object, type) and issubclass(type_object, base)
    except Exception:  # a type whose __subclasscheck__ misbehaves
        return False


def is_tensor_type(type_object: object) -> bool:
    return _subclass(type_object, _torch(), "Tensor")


def is_array_type(type_object: object) -> bool:
    return _subclass(type_object, _numpy(), "ndarray")


def is_storage_type(type_object: object) -> bool:
    """``tensor.untyped_storage()`` and the legacy typed storages: their repr lists every byte (debugpy#1660)."""
    torch = _torch()
    return _subclass(type_object, torch, "UntypedStorage") or _subclass(type_object, torch, "TypedStorage")


def _is_ours(value: object) -> bool:
    kind = type(value)
    return is_tensor_type(kind) or is_array_type(kind) or is_storage_type(kind)


_CONTAINERS: tuple[type, ...] = (list, tuple, dict)


def _container_type(type_object: object) -> bool:
    return type_object in _CONTAINERS or type_object is collections.OrderedDict


# ----------------------------------------------------------------------------- the one line


def _attempt(read: Callable[[], object], default: object = None) -> Any:
    try:
        return read()
    except Exception:
        return default


def _dims(shape: Iterable[object]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _short_dtype(dtype: object) -> str:
    text = str(dtype)
    text = text[len("torch.") :] if text.startswith("torch.") else text
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: object, floating: bool) -> str:
    if isinstance(value, float):
        text = format(value, ".6g")
        # torch prints a whole float as "3.": keep a float looking like one
        return text + "." if floating and text.lstrip("-").isdigit() else text
    if isinstance(value, list):
        return "[" + ", ".join(_number(v, floating) for v in value) + "]"
    return str(value)


def _tensor_shape(t: Any) -> str:
    if _attempt(lambda: bool(t.is_nested), False):
        return "[nested]"
    shape = _attempt(lambda: tuple(t.shape))
    return "[?]" if shape is None else _dims(shape)


def _exact_tensor(t: Any, torch: Any) -> bool:
    """A plain tensor or parameter: its operations are torch's own (no subclass's dispatch, no collectives)."""
    parameter = getattr(getattr(torch, "nn", None), "Parameter", None)
    return type(t) is torch.Tensor or (parameter is not None and type(t) is parameter)


def tensor_line(t: Any) -> str:
    """``Tensor[64, 512] float32 cuda:0 requires_grad``: metadata only (no sync, no copy)."""
    torch = _torch()
    parts = [type(t).__name__ + _tensor_shape(t)]
    parts.append(_short_dtype(_attempt(lambda: t.dtype, "?")))
    device = _attempt(lambda: t.device)
    parts.append(str(device) if device is not None else "?")
    layout = _attempt(lambda: t.layout)
    strided = layout is getattr(torch, "strided", None)
    if layout is not None and not strided:
        parts.append(_short_dtype(layout))
    if _attempt(lambda: bool(t.requires_grad), False):
        parts.append("requires_grad")
    line = " ".join(parts)
    if strided and getattr(device, "type", None) == "cpu" and _exact_tensor(t, torch):
        values = _tiny_tensor_values(t)
        if values is not None:
            line += " = " + values
    return line


def _tiny_tensor_values(t: Any) -> str | None:
    """The values of a CPU tensor of at most TINY_VALUES elements (read from host memory: nothing to sync)."""
    try:
        if t.numel() > TINY_VALUES or t.is_quantized or t.is_nested:
            return None
        return _number(t.detach().tolist(), bool(t.is_floating_point()))
    except Exception:
        return None


def array_line(a: Any) -> str:
    """``ndarray[3, 4] float64``; at most TINY_VALUES elements: `` = [...]`` too."""
    shape = _attempt(lambda: tuple(a.shape))
    line = (
        f"{type(a).__name__}{'[?]' if shape is None else _dims(shape)} {_short_dtype(_attempt(lambda: a.dtype, '?'))}"
    )
    try:
        if a.size <= TINY_VALUES and a.dtype.kind in "biufc":
            line += " = " + _number(a.tolist(), a.dtype.kind in "fc")
    except Exception:
        pass
    return line


def _storage_facts(s: Any) -> tuple[int | None, str | None, str]:
    """(bytes, dtype of a typed storage, device) - a typed storage's own methods warn that it is deprecated,
    the untyped storage it wraps does not."""
    raw = getattr(s, "_untyped_storage", s)
    nbytes = _attempt(lambda: int(raw.nbytes()))
    dtype = _attempt(lambda: _short_dtype(s.dtype)) if raw is not s else None
    return nbytes, dtype, str(_attempt(lambda: raw.device, "?"))


def storage_line(s: Any) -> str:
    """``UntypedStorage[4.0 MiB] cpu`` (never its elements)."""
    nbytes, dtype, device = _storage_facts(s)
    size = "?" if nbytes is None else human_bytes(nbytes).split(" (")[0]
    return " ".join(p for p in (f"{type(s).__name__}[{size}]", dtype, device) if p)


def _item_text(value: object) -> str:
    """An item of a container's line: tensors/arrays as their one line, no user ``repr`` called."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= _TEXT_CHARS else value[:_TEXT_CHARS] + "...")
    kind = type(value)
    line = _data_line(value, kind)
    if line is not None:
        return line
    if isinstance(value, (list, tuple, dict)):
        return f"{kind.__name__}[{len(value)}]"
    return kind.__name__


def _data_line(value: object, kind: type) -> str | None:
    """A tensor's, an array's or a storage's one line; None for anything else."""
    if is_tensor_type(kind):
        return tensor_line(value)
    if is_array_type(kind):
        return array_line(value)
    if is_storage_type(kind):
        return storage_line(value)
    return None


def container_line(value: Any) -> str | None:
    """``list[3]: [Tensor[64, 512] float32 cpu, ...]`` for a list/tuple/dict holding a tensor or array among
    its first CONTAINER_PEEK items; None otherwise (pydevd's own repr then)."""
    if isinstance(value, dict):
        items: list[tuple[object, object]] = list(itertools.islice(value.items(), CONTAINER_PEEK))
        values = [v for _, v in items]
        opening, closing = "{", "}"
    else:
        values = list(itertools.islice(value, CONTAINER_PEEK))
        items = [(None, v) for v in values]
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
    if not any(_is_ours(v) for v in values):
        return None
    total = len(value)
    line = f"{type(value).__name__}[{total}]: {opening}"
    shown = 0
    for key, item in items:
        text = _item_text(item) if key is None else f"{_item_text(key)}: {_item_text(item)}"
        if shown and len(line) + len(text) > LINE_CHARS:
            break
        line += (", " if shown else "") + text
        shown += 1
    if shown < total:
        line += f", ... +{total - shown}"
    return line + closing


def one_line(value: object) -> str | None:
    """What the variables pane shows for ``value``; None when it is not ours (pydevd's own text then)."""
    kind = type(value)
    if kind is Fact:
        return str(value)
    if isinstance(value, Statistics):
        return _statistics_summary(value.target)
    if kind is Attributes:
        return "every attribute, as the debugger lists them (expand)"
    line = _data_line(value, kind)
    if line is not None:
        return line
    if _container_type(kind):
        return container_line(value)
    return None


# ----------------------------------------------------------------------------- children


def human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit} ({count:,} B)"
        size /= 1024
    raise AssertionError("unreachable")


def tensor_children(t: Any) -> list[Child]:
    """Summary first; every read is metadata (``grad`` is the gradient tensor object, not its data)."""
    torch = _torch()
    rows: list[Child] = [
        ("shape", Fact(_tensor_shape(t)), ".shape"),
        ("dtype", Fact(_short_dtype(_attempt(lambda: t.dtype, "?"))), ".dtype"),
        ("device", Fact(str(_attempt(lambda: t.device, "?"))), ".device"),
    ]
    layout = _attempt(lambda: t.layout)
    if layout is getattr(torch, "strided", None):
        stride = _attempt(lambda: tuple(t.stride()))
        if stride is not None:
            rows.append(("strides", Fact(_dims(stride)), ".stride()"))
        contiguous = _attempt(lambda: bool(t.is_contiguous()))
        if contiguous is not None:
            rows.append(("contiguous", contiguous, ".is_contiguous()"))
    elif layout is not None:
        rows.append(("layout", Fact(_short_dtype(layout)), ".layout"))
        nnz = _attempt(lambda: int(t._nnz()))
        if nnz is not None:
            rows.append(("stored values", nnz, "._nnz()"))
    numel = _attempt(lambda: int(t.numel()))
    if numel is not None:
        rows.append(("numel", numel, ".numel()"))
        size = _attempt(lambda: int(t.element_size()))
        if size is not None and layout is getattr(torch, "strided", None):
            rows.append(("bytes", Fact(human_bytes(numel * size)), None))
    requires_grad = _attempt(lambda: bool(t.requires_grad))
    if requires_grad is not None:
        rows.append(("requires_grad", requires_grad, ".requires_grad"))
    is_leaf = _attempt(lambda: bool(t.is_leaf))
    if is_leaf is not None:
        rows.append(("is_leaf", is_leaf, ".is_leaf"))
    rows.append(("grad_fn", _attempt(lambda: t.grad_fn), ".grad_fn"))
    # .grad of a non-leaf that does not retain it is always None, and reading it warns into the rank's output
    if is_leaf or _attempt(lambda: bool(t.retains_grad), False):
        rows.append(("grad", _attempt(lambda: t.grad), ".grad"))
    rows.append(("statistics", Statistics(t), None))
    rows.append(("attributes", Attributes(t), ""))
    return rows


def array_children(a: Any) -> list[Child]:
    rows: list[Child] = [
        ("shape", Fact(_dims(_attempt(lambda: tuple(a.shape), ("?",)))), ".shape"),
        ("dtype", Fact(_short_dtype(_attempt(lambda: a.dtype, "?"))), ".dtype"),
        ("strides", Fact(_dims(_attempt(lambda: tuple(a.strides), ("?",))) + " bytes"), ".strides"),
    ]
    contiguous = _attempt(lambda: bool(a.flags.c_contiguous))
    if contiguous is not None:
        rows.append(("contiguous", contiguous, ".flags.c_contiguous"))
    size = _attempt(lambda: int(a.size))
    if size is not None:
        rows.append(("size", size, ".size"))
    nbytes = _attempt(lambda: int(a.nbytes))
    if nbytes is not None:
        rows.append(("bytes", Fact(human_bytes(nbytes)), None))
    rows.append(("is_view", _attempt(lambda: a.base is not None), None))
    rows.append(("statistics", Statistics(a), None))
    rows.append(("attributes", Attributes(a), ""))
    return rows


def storage_children(s: Any) -> list[Child]:
    nbytes, dtype, device = _storage_facts(s)
    rows: list[Child] = []
    if nbytes is not None:
        rows.append(("bytes", Fact(human_bytes(nbytes)), None))
    if dtype is not None:
        rows.append(("dtype", Fact(dtype), ".dtype"))
    rows.append(("device", Fact(device), ".device"))
    rows.append(("attributes", Attributes(s), ""))
    return rows


# ----------------------------------------------------------------------------- statistics (on expand only)


def strided_sample(shape: tuple[int, ...], cap: int) -> tuple[tuple[slice, ...], int]:
    """The index of a view of at most about ``cap`` elements of an array of ``shape``: every k-th index
    along the leading dimensions (a view: nothing copied), and how many elements it holds."""
    count = 1
    for size in shape:
        count *= size
    index = []
    for size in shape:
        if count <= cap or size <= 1:
            index.append(slice(None))
            continue
        step = min(size, -(-count // cap))
        index.append(slice(None, None, step))
        count = count // size * -(-size // step)
    return tuple(index), count


def _index_text(index: tuple[slice, ...]) -> str:
    parts = [":" if s.step is None else f"::{s.step}" for s in index]
    while parts and parts[-1] == ":":
        parts.pop()
    return "[" + ", ".join(parts) + "]" if parts else ""


def _sample_plan(target: Any) -> tuple[tuple[slice, ...], int, int]:
    """(sample index, sampled elements, all elements) for a tensor/array whose statistics we compute."""
    shape = tuple(int(d) for d in target.shape)
    total = 1
    for d in shape:
        total *= d
    index, count = strided_sample(shape, STATS_ELEMENTS)
    return index, count, total


def _statistics_summary(target: object) -> str:
    reason = _no_statistics(target)
    if reason is not None:
        return reason
    try:
        index, count, total = _sample_plan(target)
    except Exception as exc:
        return f"not available: {describe(exc)}"
    if count >= total:
        return f"min, max, mean, NaNs of {_all_elements(total)} (expand to compute)"
    return f"min, max, mean, NaNs of {count:,} of {total:,} elements, {_index_text(index)} (expand to compute)"


def _all_elements(total: int) -> str:
    return "its 1 element" if total == 1 else f"all {total:,} elements"


def _no_statistics(target: Any) -> str | None:
    """Why the statistics of ``target`` are not computed, or None when they are."""
    kind = type(target)
    if is_tensor_type(kind):
        t = target
        torch = _torch()
        if not _exact_tensor(t, torch):
            return f"not computed for a {kind.__name__}: a tensor subclass's operations may run collectives"
        if _attempt(lambda: t.device.type) == "meta":
            return "a meta tensor has no data"
        if _attempt(lambda: t.layout) is not getattr(torch, "strided", None):
            return "not computed for a sparse tensor"
        if _attempt(lambda: bool(t.is_quantized or t.is_nested), True):
            return "not computed for a quantized or nested tensor"
        return None
    if is_array_type(kind):
        if _attempt(lambda: target.dtype.kind, "O") not in "biufc":
            return "not computed for a non-numeric dtype"
        return None
    return "not a tensor"


def statistics_children(target: Any) -> list[Child]:
    """min/max/mean/NaNs/infs and the first values of ``target``: bounded (module docstring); each figure on
    its own, so one a dtype cannot do (min of a complex tensor) says why and the others still come."""
    reason = _no_statistics(target)
    if reason is not None:
        return [("not computed", Fact(reason), None)]
    started = time.perf_counter()
    index, count, total = _sample_plan(target)
    if total == 0:
        return [("empty", Fact("no elements"), None)]
    rows: list[Child] = []
    if is_tensor_type(type(target)):
        rows.extend(_torch_figures(target[index].detach(), count))
    else:
        rows.extend(_numpy_figures(target[index], count))
    where = _all_elements(total) if count >= total else f"{count:,} of {total:,} elements, {_index_text(index)}"
    rows.append(("over", Fact(where), None))
    rows.append(_first_values(target))
    rows.append(("took", Fact(f"{(time.perf_counter() - started) * 1000:.1f} ms"), None))
    return rows


def _figure(compute: Callable[[], object]) -> Any:
    """``compute()``, or a Fact saying why it failed (a dtype without that reduction, say)."""
    try:
        return compute()
    except Exception as exc:
        return Fact(f"n/a: {describe(exc)}")


def _torch_figures(sample: Any, count: int) -> list[Child]:
    """Computed on the tensor's device in two passes (aminmax, sum); ``tolist`` of a 0-dim result copies
    one scalar back.  A finite sum proves there is no NaN or inf: only a sum that is not costs the counts."""
    torch = _torch()
    floating, complex_ = bool(sample.is_floating_point()), bool(sample.is_complex())
    if floating and sample.element_size() < 2:  # float8: its reductions are not implemented (or wrong)
        sample = sample.float()
    # float16/bfloat16 summed in float32 (their own range overflows); ints and bools sum exactly in int64
    total = _figure(
        lambda: sample.sum(dtype=torch.float32) if floating and sample.element_size() == 2 else sample.sum()
    )
    extremes = _figure(lambda: torch.aminmax(sample))
    low, high = extremes, extremes
    if not isinstance(extremes, Fact):
        low, high = _figure(lambda: extremes.min.tolist()), _figure(lambda: extremes.max.tolist())
    rows: list[Child] = [("min", low, None), ("max", high, None)]
    if isinstance(total, Fact):
        rows.append(("mean", total, None))
        return rows
    rows.append(("mean", _figure(lambda: (total / count).tolist()), None))
    if floating or complex_:
        finite = _figure(lambda: bool(torch.isfinite(total).tolist()))
        if finite is True:
            rows += [("NaNs", 0, None), ("infs", 0, None)]
        else:
            rows.append(("NaNs", _figure(lambda: int(torch.isnan(sample).sum().tolist())), None))
            rows.append(("infs", _figure(lambda: int(torch.isinf(sample).sum().tolist())), None))
    return rows


def _numpy_figures(sample: Any, count: int) -> list[Child]:
    np = _numpy()
    kind = sample.dtype.kind
    total = _figure(lambda: sample.sum(dtype=np.complex128 if kind == "c" else np.float64))
    rows: list[Child] = [
        ("min", _figure(lambda: sample.min().item()), None),
        ("max", _figure(lambda: sample.max().item()), None),
        ("mean", total if isinstance(total, Fact) else _figure(lambda: (total / count).item()), None),
    ]
    if kind in "fc":
        if not isinstance(total, Fact) and bool(np.isfinite(total)):
            rows += [("NaNs", 0, None), ("infs", 0, None)]
        else:
            rows.append(("NaNs", _figure(lambda: int(np.isnan(sample).sum())), None))
            rows.append(("infs", _figure(lambda: int(np.isinf(sample).sum())), None))
    return rows


def _first_values(target: Any) -> Child:
    """The first FIRST_VALUES of the first row, named by their index (``[0, 0, :10]``): a view, then a copy of
    those few values."""
    try:
        ndim = len(target.shape)
        if ndim == 0:
            name, values = "value", target
        else:
            lead = (0,) * (ndim - 1)
            name = "[" + "".join(f"{i}, " for i in lead) + f":{FIRST_VALUES}]"
            values = target[lead][:FIRST_VALUES]
        if is_tensor_type(type(values)):
            floating = bool(values.is_floating_point())
            listed = values.detach().tolist()
        else:
            floating = values.dtype.kind in "fc"
            listed = values.tolist()
        return (name, Fact(_number(listed, floating)), None)
    except Exception as exc:
        return ("values", Fact(f"n/a: {describe(exc)}"), None)


# ----------------------------------------------------------------------------- the pydevd providers


class TensorResolver:
    """pydevd's TypeResolveProvider (duck-typed: the class is pydevd's, and we never import pydevd here):
    the children of tensors, arrays and our ``statistics``/``attributes`` children."""

    def __init__(self, fallback: Any = None) -> None:
        self.fallback = fallback  # pydevd's defaultResolver: stock children, for "attributes"

    def can_provide(self, type_object: object, type_name: str) -> bool:
        try:
            return (
                type_object in (Statistics, Attributes)
                or is_tensor_type(type_object)
                or is_array_type(type_object)
                or is_storage_type(type_object)
            )
        except Exception:
            return False

    def children(self, obj: Any) -> list[Child]:
        try:
            kind = type(obj)
            if kind is Statistics:
                return statistics_children(obj.target)
            if kind is Attributes:
                return self._stock_children(obj.target)
            if is_tensor_type(kind):
                return tensor_children(obj)
            if is_array_type(kind):
                return array_children(obj)
            if is_storage_type(kind):
                return storage_children(obj)
        except Exception as exc:
            return [("error", Fact(f"the tensor view failed: {describe(exc)}"), None)]
        return []

    def _stock_children(self, target: object) -> list[Child]:
        fallback = self.fallback
        if fallback is None:
            return []
        contents = getattr(fallback, "get_contents_debug_adapter_protocol", None)
        if contents is not None:
            return [(str(n), v, e) for n, v, e in contents(target)]
        return [(str(n), v, None) for n, v in fallback.get_dictionary(target).items()]

    # debugpy (DAP): children in this order, with the expressions "Add to Watch" evaluates
    def get_contents_debug_adapter_protocol(self, obj: Any, fmt: Mapping[str, object] | None = None) -> list[Child]:
        return self.children(obj)

    # pydevd-pycharm (and debugpy's older paths): name -> value, in order
    def get_dictionary(self, obj: Any) -> dict[str, object]:
        return {name: value for name, value, _ in self.children(obj)}

    def resolve(self, obj: Any, attribute: str) -> object:
        try:
            if type(obj) is Attributes and self.fallback is not None:
                return self.fallback.resolve(obj.target, attribute)
            for name, value, _ in self.children(obj):
                if name == attribute:
                    return value
        except Exception:
            pass
        return None


class TensorText:
    """pydevd's StrPresentationProvider (duck-typed): the one line of tensors, arrays, our children, and of
    lists/tuples/dicts holding tensors; ``None`` (pydevd's own text) for everything else."""

    def can_provide(self, type_object: object, type_name: str) -> bool:
        try:
            return (
                type_object in (Fact, Statistics, Attributes)
                or is_tensor_type(type_object)
                or is_array_type(type_object)
                or is_storage_type(type_object)
                or _container_type(type_object)
            )
        except Exception:
            return False

    def get_str(self, val: object, do_trim: bool = True) -> str | None:  # pydevd-pycharm passes do_trim
        try:
            return one_line(val)
        except Exception:
            return None

    def get_str_in_context(self, val: object, context: str) -> str | None:
        # "Copy Value" asks for the real repr: pydevd's own (None), as the user explicitly wants the values
        return None if context == "clipboard" else self.get_str(val)


# ----------------------------------------------------------------------------- registration


def enabled(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get(ENV_TENSOR_VIEW, "1").strip() != "0"


def install(env: Mapping[str, str] | None = None) -> bool:
    """Put our providers first in the pydevd this process has loaded (debugpy's or pydevd-pycharm's);
    True when they are there.  Call after the debugger's import, before any client connects; a second
    call changes nothing.  Never raises."""
    if not enabled(env):
        return False
    try:
        utils = sys.modules.get("_pydevd_bundle.pydevd_extension_utils")
        api = sys.modules.get("_pydevd_bundle.pydevd_extension_api")
        if utils is None or api is None:
            log(f"tensor view not installed in pid {os.getpid()}: pydevd is not loaded")
            return False
        resolvers: list[Any] = utils.extensions_of_type(api.TypeResolveProvider)
        texts: list[Any] = utils.extensions_of_type(api.StrPresentationProvider)
        if any(type(p).__name__ == TensorResolver.__name__ for p in resolvers):
            return True
        fallback = getattr(sys.modules.get("_pydevd_bundle.pydevd_resolver"), "defaultResolver", None)
        resolver, text = TensorResolver(fallback), TensorText()
        resolvers.insert(0, resolver)
        texts.insert(0, text)
        _forget_earlier_choices(resolver, text)
        return True
    except Exception as exc:
        log(f"tensor view not installed in pid {os.getpid()}: {describe(exc)}")
        return False


def _forget_earlier_choices(resolver: TensorResolver, text: TensorText) -> None:
    """pydevd caches its provider per type at the first value of it shown: drop what it chose for ours
    (only there when variables were shown before ``install``)."""
    for name in ("_pydevd_bundle.pydevd_xml", "_pydevd_bundle.pydevd_thrift"):
        handler = getattr(sys.modules.get(name), "_TYPE_RESOLVE_HANDLER", None)
        for cache_name, provider in (("_type_to_resolver_cache", resolver), ("_type_to_str_provider_cache", text)):
            cache = getattr(handler, cache_name, None)
            if isinstance(cache, dict):
                for kind in [k for k in cache if provider.can_provide(k, "")]:
                    cache.pop(kind, None)
