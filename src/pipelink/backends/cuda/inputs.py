"""A run's inputs on one CUDA device: zero-copy views of device tensors (pl.Tensor, PyTorch, any CUDA
DLPack producer), uploads of host data, and the ordering of our streams after the producers' streams.

Owned by :class:`~pipelink.backends.cuda.CUDABackend`, which hands it what it needs when it is made.
Never imports PyTorch by itself: its fast path starts once a PyTorch tensor has been seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...dtypes import TORCH_DTYPE_NAMES, DType, get_dtype
from ...errors import CUDAError, InvalidArgumentError
from ...tensor import Tensor, asarray
from ..cpu import host_array
from .memory import CUDAMemory

__all__ = ["CUDAInputs"]


class _TorchDTypes(dict):
    """torch.dtype -> PipeLink dtype name, filled on first use (never imports torch by itself)."""

    def get(self, key, default=None):
        if not self:
            import torch

            for n in TORCH_DTYPE_NAMES:
                self[getattr(torch, n)] = n
        return super().get(key, default)


_TORCH_DTYPES = _TorchDTypes()


class _NotTorch:
    """Stands for ``torch.Tensor`` until PyTorch was seen (no value has this type)."""


class CUDAInputs:
    """Imports and matches the inputs of runs on one device.

    Parameters
    ----------
    memory : CUDAMemory
        Where uploads of host data go.
    driver : module
        ``cuda.bindings.driver``.
    name : str
        ``"cuda:N"``.
    index : int
        The device ordinal.
    handle_of : callable
        The driver handle of one of the backend's streams.
    order_event : cuda.core.Event
        An event of the backend's, recorded on a producer's stream and waited on by ours in turn.
    error : callable
        ``(CUresult code, what) -> CUDAError``.
    """

    def __init__(
        self,
        memory: CUDAMemory,
        driver: Any,
        *,
        name: str,
        index: int,
        handle_of: Callable[[Any], Any],
        order_event: Any,
        error: Callable[[int, str], CUDAError],
    ):
        self._memory = memory
        self._driver = driver
        self._name, self._index = name, index
        self._handle_of = handle_of
        self._order_event = order_event  # kept alive: its handle is used below
        self._order_handle = order_event.handle
        self._error = error
        self._torch_tensor: type = _NotTorch  # torch.Tensor once a PyTorch input was imported
        self._torch_stream: Any = None  # PyTorch's accessor of its current raw stream, then
        self._cu_streams: dict[int, Any] = {}

    def import_input(
        self,
        value: Any,
        stream: Any,
        *,
        dtype: DType | None = None,
        pinned_key: str | None = None,
        producers: list | None = None,
    ) -> Tensor:
        """A user's input as a device Tensor: CUDA DLPack producers zero-copy, host data uploaded.

        ``producers``: where PyTorch inputs note ``(their stream, ours)`` for one :meth:`order_after` per
        run; without it each PyTorch input is ordered on its own."""
        if isinstance(value, Tensor) and value.is_cuda:
            self.check_device(value)
            return value
        if type(value).__module__ == "torch" and getattr(value, "is_cuda", False):
            fast = self._import_torch(value, stream, producers)
            if fast is not None:
                return fast
        if not isinstance(value, np.ndarray | np.generic | Tensor) and hasattr(value, "__dlpack__"):
            dev = value.__dlpack_device__() if hasattr(value, "__dlpack_device__") else (1, 0)
            if dev[0] == 2:  # kDLCUDA
                tensor = Tensor.from_dlpack(value, stream=int(stream.handle))
                self.check_device(tensor)
                return tensor
            value = asarray(value)
        array = value.numpy() if isinstance(value, Tensor) else host_array(value, dtype)
        # Not np.ascontiguousarray: it turns a 0-d array into a 1-d one.
        contiguous = array if array.flags.c_contiguous else array.copy(order="C")
        return self._memory.upload(contiguous, stream, pinned_key=pinned_key)

    def _import_torch(self, value: Any, stream: Any, producers: list | None = None) -> Tensor | None:
        """PyTorch CUDA tensors without the DLPack round trip (which costs tens of microseconds in
        PyTorch): the same zero-copy view, ordered after PyTorch's current stream by one event. None when
        the tensor needs the general path (another device, an unsupported dtype)."""
        import torch

        name = _TORCH_DTYPES.get(value.dtype)
        if name is None or value.get_device() != self._index:
            return None
        self._torch_tensor = torch.Tensor  # from now on, match_inputs recognises PyTorch tensors
        self._torch_stream = torch._C._cuda_getCurrentRawStream  # noqa: SLF001 - the fast accessor
        raw = torch._C._cuda_getCurrentRawStream(self._index)  # noqa: SLF001 - the fast accessor
        if producers is None:
            self.order_after([(raw, stream)])
        else:
            producers.append((raw, stream))
        return Tensor._trusted(
            value.data_ptr(), tuple(value.shape), get_dtype(name), self._name, value.stride(), value
        )

    def order_after(self, producers: list) -> None:
        """Make each of our streams wait for the work queued so far on a producer's stream.

        ``producers``: ``(raw producer stream handle, our stream)`` pairs; each distinct pair costs one
        event record and one wait, none when the producer's stream is ours."""
        done = None
        drv = self._driver
        for raw, ours in producers:
            handle = self._handle_of(ours)
            key = (raw, int(handle))
            if raw == key[1]:
                continue
            if done is None:
                done = {key}
            elif key in done:
                continue
            else:
                done.add(key)
            theirs = self._cu_streams.get(raw)
            if theirs is None:
                if len(self._cu_streams) > 256:
                    self._cu_streams.clear()
                theirs = self._cu_streams[raw] = drv.CUstream(raw)
            (err,) = drv.cuEventRecord(self._order_handle, theirs)
            if err == 0:
                (err,) = drv.cuStreamWaitEvent(handle, self._order_handle, 0)
            if err != 0:
                raise self._error(int(err), "ordering after the producer's stream")

    def match(self, signature: tuple, given: dict, stream: Any, tensors: bool) -> Any:
        """``given`` as kernel arguments (``tensors``) or as ``(pointer, strides)`` places when every
        input already lives on this device with the shape, dtype and layout of ``signature``, ordered
        after PyTorch's current stream; None when any input needs the general import."""
        if len(given) != len(signature):
            return None
        torch_tensor, device, index = self._torch_tensor, self._name, self._index
        out: Any = {} if tensors else []
        torch_inputs = False
        for name, shape, dtype, contiguous in signature:
            value = given.get(name)
            if type(value) is torch_tensor:
                if dict.get(_TORCH_DTYPES, value.dtype) != dtype or value.shape != shape:
                    return None
                torch_inputs = True
                if tensors:
                    if value.get_device() != index or value.is_contiguous() != contiguous:
                        return None
                    out[name] = Tensor._trusted(
                        value.data_ptr(), shape, get_dtype(dtype), device, value.stride(), value, contiguous
                    )
                else:
                    # Places are keys of graphs captured here: a pointer of another device (one
                    # address space) or other strides match no key, so neither is checked here.
                    out.append((value.data_ptr(), value.stride()))
            elif type(value) is Tensor and value.device == device:
                if value.dtype.name != dtype or value.shape != shape or value.is_contiguous != contiguous:
                    return None
                if tensors:
                    out[name] = value
                else:
                    out.append((value.ptr, value.strides))
            else:
                return None
        if torch_inputs:
            self.order_after([(self._torch_stream(index), stream)])
        return out if tensors else tuple(out)

    def torch_stream(self, values: Any) -> int | None:
        """The raw handle of PyTorch's current stream on this device when a PyTorch CUDA tensor is among
        ``values`` (a run's inputs and output buffers), else None."""
        for value in values:
            if type(value).__module__.startswith("torch") and getattr(value, "is_cuda", False):
                import torch

                return torch._C._cuda_getCurrentRawStream(self._index)  # noqa: SLF001 - the fast accessor
        return None

    def import_output(self, name: str, value: Any, stream: Any) -> Tensor:
        """A caller's device buffer for output ``name`` (pl.Tensor, PyTorch, any CUDA DLPack producer),
        viewed in place: it must live on this device and be contiguous."""
        if isinstance(value, Tensor):
            tensor = value
        elif type(value).__module__.startswith("torch") and _TORCH_DTYPES.get(value.dtype) is not None:
            device = f"cuda:{value.get_device()}" if value.is_cuda else "cpu"
            dtype = get_dtype(_TORCH_DTYPES.get(value.dtype))
            shape, strides = tuple(value.shape), value.stride()
            tensor = Tensor._trusted(value.data_ptr(), shape, dtype, device, strides, value)
        elif hasattr(value, "__dlpack__"):
            on_device = getattr(value, "__dlpack_device__", lambda: (1, 0))()[0] == 2  # kDLCUDA
            tensor = Tensor.from_dlpack(value, stream=int(stream.handle) if on_device else None)
        else:
            raise InvalidArgumentError(
                f"out[{name!r}] must be a device tensor (pl.Tensor, PyTorch, CuPy or another DLPack "
                f"producer; got {type(value).__name__})",
                output=name,
            )
        if tensor.device != self._name:
            where = "host memory" if not tensor.is_cuda else f"on {tensor.device}"
            raise InvalidArgumentError(
                f"out[{name!r}] is {where}, but the pipeline runs on {self._name}: pass a tensor of that "
                "device",
                output=name,
                device=tensor.device,
            )
        if not tensor.is_contiguous:
            raise InvalidArgumentError(
                f"out[{name!r}] is not contiguous: pass a contiguous buffer (torch.empty, pl.empty)",
                output=name,
            )
        return tensor

    def check_device(self, tensor: Tensor) -> None:
        """Refuse a device tensor of another GPU."""
        if tensor.device != self._name:
            raise InvalidArgumentError(
                f"input tensor lives on {tensor.device}, but the pipeline runs on {self._name}; "
                "move it first",
                device=tensor.device,
            )
