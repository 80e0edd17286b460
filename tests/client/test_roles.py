"""Every handle answers every call of every role it plays (leveled_ray.roles), with the role's
signature, in its async form and in its synchronous twin: plain and sharded handles cannot
drift apart."""

import inspect

import pytest

import leveled_ray as lr
from leveled_ray import roles, roles_admin
from leveled_ray.admin.handle import Admin
from leveled_ray.client.reader import Reader

HANDLES = (lr.Store, lr.ShardedStore, lr.Snapshot, lr.ShardedSnapshot, Reader,
           lr.ShardedReader, Admin, lr.ShardedAdmin)
ROLES = [r for module in (roles, roles_admin) for r in vars(module).values()
         if isinstance(r, type) and roles.Role in r.__mro__ and r is not roles.Role
         and r.__module__ == module.__name__]

#: The roles each handle plays: a handle that stops playing one fails here, not in a user's
#: code.
PLAYS = {
    lr.Store: {roles.KeyReads, roles.Queries, roles.History, roles.Writes, roles.PointsInTime,
               roles.Transactions, roles.Checkpoints, roles.HistoryLeases, roles.Maintenance,
               roles.Backups},
    lr.Snapshot: {roles.KeyReads, roles.Queries, roles.History, roles.View, roles.SnapshotView},
    Reader: {roles.KeyReads, roles.Queries, roles.History, roles_admin.Following},
    Admin: {roles.History, roles.Checkpoints, roles_admin.Administration, roles.Backups},
}
PLAYS |= {lr.ShardedStore: PLAYS[lr.Store] | {roles_admin.Splits, roles_admin.Moves},
          lr.ShardedSnapshot: PLAYS[lr.Snapshot], lr.ShardedReader: PLAYS[Reader],
          lr.ShardedAdmin: PLAYS[Admin] | {roles_admin.Splits}}


def calls(role) -> list[str]:
    return sorted(n for n, v in vars(role).items() if getattr(v, "__isabstractmethod__", False))


def shape(fn) -> list[tuple] | str:
    """A signature's parameters as a caller sees them: name, kind, default, and annotation
    where one is given (a property has none)."""
    if isinstance(fn, property):
        return "property"
    return [(p.name, p.kind, p.default, p.annotation)
            for p in inspect.signature(fn).parameters.values()]


def sync_shape(name: str, fn) -> list[tuple] | str:
    """What the synchronous form of call ``name`` takes, from its async form ``fn``: the same,
    but a plain function where a call of :data:`~leveled_ray.roles.AWAITS_ITS_FUNCTION` takes
    an async one."""
    found = shape(fn)
    if name not in roles.AWAITS_ITS_FUNCTION or isinstance(found, str):
        return found
    return [(n, k, d, a.replace("Awaitable[T]", "T") if isinstance(a, str) else a)
            for n, k, d, a in found]


def same_shape(got, want) -> bool:
    if "property" in (got, want) or len(got) != len(want):
        return got == want
    return all(g[:3] == w[:3] and (inspect.Parameter.empty in (g[3], w[3]) or g[3] == w[3])
               for g, w in zip(got, want))


def test_every_handle_plays_its_roles_and_nothing_is_abstract():
    for handle in HANDLES:
        played = {r for r in ROLES if r in handle.__mro__}
        assert played == PLAYS[handle], handle.__name__
        assert not handle.__abstractmethods__, (handle.__name__, handle.__abstractmethods__)


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.__name__)
def test_each_call_of_a_role_has_the_roles_signature_on_every_handle(role):
    players = [h for h in HANDLES if role in h.__mro__]
    assert players, f"no handle plays {role.__name__}"
    for name in calls(role):
        want = shape(vars(role)[name])
        for handle in players:
            got = shape(inspect.getattr_static(handle, name))
            assert same_shape(got, want), f"{handle.__name__}.{name}: {got}"
            if name.endswith("_async"):  # its synchronous twin takes the same arguments
                sync = name.removesuffix("_async")
                assert same_shape(shape(inspect.getattr_static(handle, sync)),
                                  sync_shape(sync, vars(role)[name])), f"{handle.__name__}.{sync}"


def test_a_drifted_signature_is_caught():
    """The comparison can fail: a handle whose ``get_async`` renamed a parameter."""
    class Drifted(lr.Snapshot):
        async def get_async(self, bucket, name):
            return None

    assert not same_shape(shape(Drifted.get_async), shape(roles.KeyReads.get_async))
    assert same_shape(shape(lr.Snapshot.get_async), shape(roles.KeyReads.get_async))


def test_a_handle_that_lacks_a_call_cannot_be_made():
    class Partial(roles.KeyReads):
        async def get_async(self, bucket, key):
            return None

    with pytest.raises(TypeError, match="abstract"):
        Partial()


def documented(handle, name: str) -> str:
    """The docstring that documents call ``name`` of ``handle``: its own form's, or its
    twin's where one form only points at the other."""
    pointers = ("Synchronous :meth", "Awaitable :meth", "Async iterator form")
    for form in (name, f"{name}_async"):
        doc = inspect.getdoc(getattr(handle, form, None)) or ""
        if doc and not doc.startswith(pointers):
            return doc
    return ""


def test_every_public_call_states_its_cost():
    """Each public call of every handle says what it costs (round trips, requests, writes),
    as the docs promise."""
    silent = []
    for handle in HANDLES:
        for name in dir(handle):
            attr = inspect.getattr_static(handle, name)
            if name.startswith("_") or isinstance(attr, property) or not callable(attr):
                continue
            if "Cost" not in documented(handle, name.removesuffix("_async")):
                silent.append(f"{handle.__name__}.{name}")
    for entry in (lr.open, lr.connect, lr.reader, lr.admin, lr.clone, lr.gc, lr.destroy):
        if "Cost" not in (entry.__doc__ or ""):
            silent.append(f"lr.{entry.__name__}")
    assert not silent, silent


def sync_return(annotation):
    """The return annotation of a call's synchronous form, from its async form's."""
    if not isinstance(annotation, str):  # none given
        return annotation
    return annotation.replace("AsyncIterator", "Iterator", 1) if annotation.startswith(
        "AsyncIterator[") else {"AsyncIterator": "Iterator[Any]"}.get(annotation, annotation)


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.__name__)
def test_each_role_declares_both_forms_alike(role):
    """What a type checker sees of a call's synchronous form (the role's declaration) is what
    its twin takes and answers."""
    for name in calls(role):
        if not name.endswith("_async"):
            continue
        async_form, sync_form = vars(role)[name], vars(role).get(name.removesuffix("_async"))
        assert sync_form is not None, f"{role.__name__} declares no sync form of {name}"
        assert shape(sync_form) == sync_shape(name.removesuffix("_async"), async_form), name
        assert inspect.signature(sync_form).return_annotation == sync_return(
            inspect.signature(async_form).return_annotation), name
