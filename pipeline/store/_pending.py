"""Files of a store entry whose bytes are partly still being made in a thread.

A fresh engine's entry is the engine plus files that describe it (its manifest, the
analysed build log). Those take a moment of Python work; writing a large engine takes
a moment of kernel work that holds no GIL. Handing the store the engine now and the
rest as a future lets the store write one while the other is made
(VerifiedStore.put writes in the mapping's order and reads the digests last)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import Future

from pipeline.store._entry import FileData


class PendingFiles(Mapping[str, FileData]):
    def __init__(
        self,
        ready: Mapping[str, FileData],
        later: Future[dict[str, bytes]],
        later_names: tuple[str, ...],
    ) -> None:
        self._ready = dict(ready)
        self._later = later
        self._names = tuple(ready) + tuple(n for n in later_names if n not in ready)

    def __getitem__(self, name: str) -> FileData:
        if name in self._ready:
            return self._ready[name]
        if name not in self._names:
            raise KeyError(name)
        made = self._later.result()  # re-raises what failed in the thread
        if set(made) != set(self._names) - set(self._ready):
            raise RuntimeError(
                f"the files made later are {sorted(made)}, not the promised "
                f"{sorted(set(self._names) - set(self._ready))}"
            )
        return made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
