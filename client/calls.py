"""A Bookie call as the client makes it, in both forms (see
:func:`~leveled_ray.files.sync.two_forms`): :class:`Call` (one Ray call to the Bookie, sent
again if the Bookie is lost during a read), :class:`Submitted` (a put or delete handed to the
write coalescer) and :class:`Answer` (a query the Bookie answers in one call). Ray's errors
become leveled-ray's own."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import NamedTuple, overload

from ..actors.remote import resent, unwrap
from ..errors import StoreClosedError, StoreUnavailableError
from ..files.sync import F, run_sync, two_forms


def _get(ref):
    import ray

    try:
        return ray.get(ref)
    except Exception as exc:
        raise unwrap(exc) from None


async def _await(ref):
    try:
        return await ref
    except Exception as exc:
        raise unwrap(exc) from None


class Call(NamedTuple):
    """The plan of a :func:`bookie_call` method: the Bookie call's ref, what to make of its
    result, whether a store already gone counts as done (closing it), and for a read, how to
    make the call again if the Bookie is lost during it (``again``; sent again as
    :func:`~leveled_ray.actors.remote.resent` says)."""

    ref: object
    finish: Callable = lambda result: result
    closing: bool = False
    again: Callable[[], Call] | None = None

    def run(self):
        try:
            return self.finish(_get(self.ref))
        except StoreClosedError as exc:
            if self._closes_again(exc):
                return self.again().run()
            if not self._resends(exc):
                return self._gone(exc)
            return self.finish(run_sync(resent(lambda: _await(self.again().ref), exc)))

    async def run_async(self):
        try:
            return self.finish(await _await(self.ref))
        except StoreClosedError as exc:
            if self._closes_again(exc):
                return await self.again().run_async()
            if not self._resends(exc):
                return self._gone(exc)
            return self.finish(await resent(lambda: _await(self.again().ref), exc))

    def _resends(self, exc: StoreClosedError) -> bool:
        """Whether this is a read whose Bookie was lost during it (sent again)."""
        return (isinstance(exc, StoreUnavailableError) and self.again is not None
                and not self.closing)

    def _closes_again(self, exc: StoreClosedError) -> bool:
        """Whether this is a close the Bookie may not have had (lost during it): it is sent
        again (``again``, while tries are left), not taken as done. The end of the actor
        that follows a close would also end the writes it took and has not answered, and
        their callers would take that error for "nothing written"."""
        return isinstance(exc, StoreUnavailableError) and self.again is not None and self.closing

    def _gone(self, exc: StoreClosedError):
        if not self.closing:
            raise exc
        return self.finish(None)  # closing a store that is gone already: done


def read_call(submit: Callable, finish: Callable = lambda result: result) -> Call:
    """The :class:`Call` of a read: ``submit()`` makes the Bookie call, now and again if the
    Bookie is lost during it."""
    return Call(submit(), finish, again=lambda: read_call(submit, finish))


@overload
def bookie_call(build: F, *, read: bool = False) -> F: ...


@overload
def bookie_call(build: None = None, *, read: bool = False) -> Callable[[F], F]: ...


def bookie_call(build=None, *, read: bool = False):
    """Mark a method as one Bookie call: ``build(self, ...)`` checks its arguments and returns
    the call's ref (or a :class:`Call`). :func:`~leveled_ray.files.sync.with_sync_twins`
    makes the method wait for it, and adds ``<name>_async``, which awaits it: one definition
    of each operation (see :func:`~leveled_ray.files.sync.two_forms`). ``read=True`` marks a
    call that changes nothing: it is sent again if the Bookie is lost during it."""
    if build is None:
        return functools.partial(bookie_call, read=read)

    @functools.wraps(build)
    def plan(self, *args, **kwargs) -> Call:
        made = build(self, *args, **kwargs)
        made = made if isinstance(made, Call) else Call(made)
        return made._replace(again=lambda: plan(self, *args, **kwargs)) if read else made
    return two_forms(plan)


class Submitted(NamedTuple):
    """The plan of a put or delete (see :func:`~leveled_ray.files.sync.two_forms`): its part,
    handed to the handle's coalescer when a form runs; the async form's answer wakes its own
    loop."""

    submit: Callable

    def run(self):
        return self.submit(None).result()

    async def run_async(self):
        return await self.submit(asyncio.get_running_loop())


class Answer(NamedTuple):
    """The plan of a query the Bookie answers in one call (see
    :func:`~leveled_ray.files.sync.two_forms`): the :class:`Call`, whose result is a list."""

    call: Call

    def run(self):
        return iter(self.call.run())

    async def _items(self):
        for item in await self.call.run_async():
            yield item

    def run_async(self):
        return self._items()
