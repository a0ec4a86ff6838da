"""puffadv.jax under sharding, on four forced host CPU devices: row-sharded inputs
stay sharded through jax.jit (no collective in the compiled HLO, the output
sharded like the inputs), with Auto and Explicit mesh axes, several mesh axes,
uneven shards, vmap, shard_map, pmap and the standard conventions; results
equal the unsharded call and the float64 reference.

XLA reads --xla_force_host_platform_device_count when its CPU backend starts,
so these cases need a process whose JAX has not started yet. Run alone, this
file sets the flag and runs them here. In a larger pytest run (JAX already
started by another module) each case is a proxy for the same case run in a
child pytest process with the flag set; the child runs once, and each proxy
reports its case's outcome (see forced_devices.py)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import forced_devices  # before jax: starts JAX with 4 host devices when it can

jax = pytest.importorskip("jax", reason="jax is not installed: the JAX handlers are untested")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import puffadv.jax as pjax  # noqa: E402
import reference  # noqa: E402

four_devices = forced_devices.on_forced_devices(__file__)

COLLECTIVE = re.compile(r"\b(all-gather|all-to-all|collective-permute|all-reduce|reduce-scatter)"
                        r"(-start)?(\.\d+)? = |= \S+ (all-gather|all-to-all|collective-permute|"
                        r"all-reduce|reduce-scatter)(-start)?\(")
PARAMS = dict(gamma=0.97, gae_lambda=0.9, rho_clip=1.3, c_clip=0.8)
SCALING_DOC = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"


@pytest.fixture(autouse=True)
def cpu_by_default():
    """Uncommitted (NumPy) inputs on the CPU too, even where JAX's default is a GPU:
    the unsharded results compared bit for bit must come from the same kernels."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def make_mesh(shape, names, explicit):
    kind = AxisType.Explicit if explicit else AxisType.Auto
    devices = np.array(jax.devices("cpu")[:int(np.prod(shape))]).reshape(shape)
    return Mesh(devices, names, axis_types=(kind,) * len(names))


def collectives(jitted, *args):
    """The collective ops of the compiled program (empty when each device computes alone)."""
    hlo = jitted.lower(*args).compile().as_text()
    return sorted({m.group(1) or m.group(4) for m in COLLECTIVE.finditer(hlo)})


def puff_inputs(rng, rows=64, horizon=24, dtype=np.float32):
    return reference.random_puff_inputs(rng, rows, horizon, dtype=dtype)


def assert_sharded_like(out, sharding):
    assert out.sharding.is_equivalent_to(sharding, out.ndim), (out.sharding, sharding)


# ----------------------------------------------------------------- puff advantage, jit


MESHES = {  # name: (mesh shape, axis names, row spec of a [rows, horizon] array)
    "one axis": ((4,), ("batch",), P("batch", None)),
    "two axes, rows over both": ((2, 2), ("x", "y"), P(("x", "y"), None)),
    "two axes, rows over the second": ((2, 2), ("x", "y"), P("y", None)),
    "two of four devices": ((2,), ("data",), P("data", None)),
}


@four_devices
@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
@pytest.mark.parametrize("layout", list(MESHES))
def test_puff_advantage_keeps_row_sharding(rng, layout, explicit):
    shape, names, spec = MESHES[layout]
    mesh = make_mesh(shape, names, explicit)
    sharding = NamedSharding(mesh, spec)
    inputs = puff_inputs(rng)
    args = [jax.device_put(x, sharding) for x in inputs]
    f = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS))
    assert collectives(f, *args) == []
    out = f(*args)
    assert_sharded_like(out, sharding)
    unsharded = pjax.compute_puff_advantage(*inputs, **PARAMS)
    assert np.array_equal(np.asarray(out), np.asarray(unsharded))
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5


@four_devices
@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
def test_eager_call_on_sharded_arrays(rng, explicit):
    sharding = NamedSharding(make_mesh((4,), ("b",), explicit), P("b", None))
    inputs = puff_inputs(rng)
    out = pjax.compute_puff_advantage(*[jax.device_put(x, sharding) for x in inputs], **PARAMS)
    assert_sharded_like(out, sharding)
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5


@four_devices
def test_float64_and_flag_inputs_sharded(rng):
    sharding = NamedSharding(make_mesh((4,), ("b",), False), P("b", None))
    v, r, d, i = puff_inputs(rng, dtype=np.float64)
    with jax.enable_x64(True):
        args = [jax.device_put(x, sharding) for x in (v, r, d.astype(bool), i)]
        f = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS))
        assert collectives(f, *args) == []
        out = f(*args)
        assert out.dtype == jnp.float64
        assert_sharded_like(out, sharding)
        assert reference.relative_error(out, reference.puff_advantage(v, r, d, i, **PARAMS)) <= 1e-12


@four_devices
def test_uneven_row_shards(rng):
    """1023 rows over 4 devices: XLA pads the last block; the padding rows never
    reach a real row (rows are independent) and are cut from the result."""
    mesh = make_mesh((4,), ("b",), False)
    sharding = NamedSharding(mesh, P("b", None))
    inputs = puff_inputs(rng, rows=1023)

    def f(*a):
        a = [jax.lax.with_sharding_constraint(x, sharding) for x in a]
        return jax.lax.with_sharding_constraint(pjax.compute_puff_advantage(*a, **PARAMS), sharding)

    jitted = jax.jit(f)
    hlo = jitted.lower(*inputs).compile().as_text()
    calls = [line for line in hlo.splitlines() if 'custom_call_target="puffadv_puff_advantage' in line]
    assert calls and all("f32[256,24]" in line.split("custom-call(")[0] for line in calls), calls
    out = jitted(*inputs)
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5


@four_devices
def test_uneven_batch_shards_of_a_convention_with_truncation(rng):
    """Padding rows of an uneven block are zeros, so never "terminated and truncated"."""
    sharding = NamedSharding(make_mesh((4,), ("b",), False), P(None, "b"))
    e = reference.random_episodes(rng, 30, 16)
    names = ("rewards", "values", "terminated", "truncated", "bootstrap_values")

    def f(*a):
        a = [jax.lax.with_sharding_constraint(x, sharding) for x in a]
        return pjax.gae(*a[:4], bootstrap_values=a[4], time_axis=0).advantages

    out = jax.jit(f)(*(e[k].T for k in names))
    ref = reference.standard_estimate("gae", *(e[k] for k in names[:4]),
                                      bootstrap_values=e["bootstrap_values"], gamma=0.99, lam=0.95)[0]
    assert reference.relative_error(out.T, ref) <= 1e-5


@four_devices
def test_mesh_of_explicit_and_auto_axes(rng):
    """Rows over an Explicit axis and an Auto axis at once."""
    devices = np.array(jax.devices("cpu")[:4]).reshape(2, 2)
    mesh = Mesh(devices, ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Auto))
    sharding = NamedSharding(mesh, P(("x", "y"), None))
    inputs = puff_inputs(rng)
    args = [jax.device_put(x, sharding) for x in inputs]
    f = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS))
    assert collectives(f, *args) == []
    out = f(*args)
    assert_sharded_like(out, sharding)
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5


@four_devices
def test_sharded_time_axis_is_gathered_under_auto_axes(rng):
    """Auto axes: XLA gathers a sharded horizon before the call (documented cost),
    and the numbers are right."""
    mesh = make_mesh((2, 2), ("x", "y"), False)
    sharding = NamedSharding(mesh, P("x", "y"))
    inputs = puff_inputs(rng)
    args = [jax.device_put(x, sharding) for x in inputs]
    f = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS))
    assert "all-gather" in collectives(f, *args)
    out = f(*args)
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5


@four_devices
def test_sharded_time_axis_is_refused_under_explicit_axes(rng):
    sharding = NamedSharding(make_mesh((2, 2), ("x", "y"), True), P("x", "y"))
    args = [jax.device_put(x, sharding) for x in puff_inputs(rng)]
    with pytest.raises(ValueError, match=r"values is sharded along its time axis \(its last axis") as info:
        jax.jit(pjax.compute_puff_advantage)(*args)
    assert str(info.value) in SCALING_DOC.read_text()  # the page quotes it word for word


@four_devices
def test_explicit_rows_sharded_two_ways_is_refused(rng):
    mesh = make_mesh((2, 2), ("x", "y"), True)
    v, r, d, i = puff_inputs(rng)
    args = [jax.device_put(v, NamedSharding(mesh, P("x", None))),
            jax.device_put(r, NamedSharding(mesh, P("y", None))), d, i]
    with pytest.raises(ValueError, match=r"rewards is sharded as P\('y'\) .* but values as P\('x'\)") as info:
        jax.jit(pjax.compute_puff_advantage)(*args)
    assert str(info.value) in SCALING_DOC.read_text()


@four_devices
def test_explicit_replicated_operand_is_sliced_locally(rng):
    """An unsharded operand beside sharded ones: each device takes its rows, no collective."""
    sharding = NamedSharding(make_mesh((4,), ("b",), True), P("b", None))
    v, r, d, i = puff_inputs(rng)
    args = [jax.device_put(v, sharding), jax.device_put(r, sharding), jax.device_put(d, sharding), i]
    f = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS))
    assert collectives(f, *args) == []
    out = f(*args)
    assert_sharded_like(out, sharding)
    assert reference.relative_error(out, reference.puff_advantage(v, r, d, i, **PARAMS)) <= 1e-5


# ----------------------------------------------------------------- vmap, shard_map, pmap


@four_devices
@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
@pytest.mark.parametrize("spec", [P(None, "y", None), P("x", "y", None)], ids=["rows", "vmapped-and-rows"])
def test_vmap_over_sharded_arrays(rng, explicit, spec):
    mesh = make_mesh((2, 2), ("x", "y"), explicit)
    sharding = NamedSharding(mesh, spec)
    inputs = [x.reshape(4, 16, 24) for x in puff_inputs(rng)]
    args = [jax.device_put(x, sharding) for x in inputs]
    f = jax.jit(jax.vmap(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS)))
    assert collectives(f, *args) == []
    out = f(*args)
    assert_sharded_like(out, sharding)
    ref = reference.puff_advantage(*[x.reshape(64, 24) for x in inputs], **PARAMS).reshape(4, 16, 24)
    assert reference.relative_error(out, ref) <= 1e-5


@four_devices
def test_inside_shard_map_each_device_computes_its_rows(rng):
    mesh = make_mesh((4,), ("b",), False)
    sharding = NamedSharding(mesh, P("b", None))
    e = reference.random_episodes(rng, 64, 24)

    def per_shard(v, r, d, i, rewards, values, terminated, last_value):
        local = v.shape[0]  # 16 of the 64 rows: the call sees this device's block only
        puff = pjax.compute_puff_advantage(v, r, d, i, **PARAMS)
        gae = pjax.gae(rewards, values, terminated, last_value=last_value, time_axis=-1).advantages
        assert puff.shape == gae.shape == (local, 24)
        return puff, gae

    f = jax.jit(jax.shard_map(per_shard, mesh=mesh, in_specs=(P("b", None),) * 7 + (P("b"),),
                              out_specs=(P("b", None), P("b", None))))
    inputs = puff_inputs(rng)
    args = [jax.device_put(x, sharding) for x in inputs] + [
        e["rewards"], e["values"], e["terminated"], e["last_value"]]
    assert collectives(f, *args) == []
    puff, gae = f(*args)
    assert reference.relative_error(puff, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5
    ref = reference.standard_estimate("gae", e["rewards"], e["values"], e["terminated"],
                                      last_value=e["last_value"], gamma=0.99, lam=0.95)[0]
    assert reference.relative_error(gae, ref) <= 1e-5


@four_devices
@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
def test_inside_shard_map_manual_over_some_axes(rng, explicit):
    """shard_map manual over x only, y left to the partitioner (Auto or Explicit)."""
    mesh = make_mesh((2, 2), ("x", "y"), explicit)
    sharding = NamedSharding(mesh, P("x", None))
    inputs = puff_inputs(rng)
    args = [jax.device_put(x, sharding) for x in inputs]
    body = lambda *a: pjax.compute_puff_advantage(*a, **PARAMS)  # noqa: E731
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None),
                              axis_names={"x"}))
    assert collectives(f, *args) == []
    out = f(*args)
    assert_sharded_like(out, sharding)
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5


@four_devices
def test_pmap_maps_one_block_per_device(rng):
    inputs = [x.reshape(4, 16, 24) for x in puff_inputs(rng)]
    out = jax.pmap(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS), backend="cpu")(*inputs)
    ref = reference.puff_advantage(*[x.reshape(64, 24) for x in inputs], **PARAMS).reshape(4, 16, 24)
    assert reference.relative_error(out, ref) <= 1e-5


def local_call_shapes(jitted, *args):
    """Operand shapes of the puffadv custom calls in the compiled program."""
    hlo = jitted.lower(*args).compile().as_text()
    return [line.split("custom-call(")[0].split("=")[-1].strip()
            for line in hlo.splitlines() if 'custom_call_target="puffadv_' in line]


@four_devices
@pytest.mark.parametrize("partitioner", ["shardy", "gspmd"])
def test_sharding_wished_by_the_output_reaches_the_call(rng, partitioner):
    """Unsharded inputs, rows-sharded out_shardings: the partitioner carries the
    wish back through the call (Shardy: the rule; GSPMD: propagate_user_sharding),
    so each device slices its rows locally and computes only them."""
    if partitioner == "gspmd" and not hasattr(jax.config, "jax_use_shardy_partitioner"):
        pytest.skip("this jax has no GSPMD partitioner to switch to")
    sharding = NamedSharding(make_mesh((4,), ("b",), False), P("b", None))
    inputs = puff_inputs(rng)
    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", partitioner == "shardy")
    try:
        f = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS), out_shardings=sharding)
        assert collectives(f, *inputs) == []
        assert local_call_shapes(f, *inputs) == ["f32[16,24]{1,0}"]
        out = f(*inputs)
    finally:
        jax.config.update("jax_use_shardy_partitioner", previous)
    assert_sharded_like(out, sharding)
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5


@four_devices
def test_gspmd_partitioner_keeps_rows_too(rng):
    """The propagation callbacks, used when Shardy is switched off."""
    if not hasattr(jax.config, "jax_use_shardy_partitioner"):
        pytest.skip("this jax has no GSPMD partitioner to switch to")
    sharding = NamedSharding(make_mesh((4,), ("b",), False), P("b", None))
    inputs = puff_inputs(rng)
    args = [jax.device_put(x, sharding) for x in inputs]
    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        f = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS))
        assert collectives(f, *args) == []
        out = f(*args)
        e = reference.random_episodes(rng, 64, 24)  # a per-row vector (last_value) first in line
        g = jax.jit(lambda lv, r, v, t: pjax.gae(r, v, t, last_value=lv, time_axis=-1).advantages)
        vector = NamedSharding(sharding.mesh, P("b"))
        gae_args = (jax.device_put(e["last_value"], vector), e["rewards"], e["values"], e["terminated"])
        assert collectives(g, *gae_args) == []
        gae = g(*gae_args)
    finally:
        jax.config.update("jax_use_shardy_partitioner", previous)
    assert_sharded_like(out, sharding)
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5
    ref = reference.standard_estimate("gae", e["rewards"], e["values"], e["terminated"],
                                      last_value=e["last_value"], gamma=0.99, lam=0.95)[0]
    assert reference.relative_error(gae, ref) <= 1e-5


@four_devices
def test_a_failing_partition_callback_warns_and_computes_replicated(rng, monkeypatch):
    """An exception inside a callback would abort the process (XLA calls them from
    C++): puffadv warns instead and has the call computed replicated."""
    import puffadv._jax_sharding as sharding_module

    def broken(*args, **kwargs):
        raise KeyError("planted")

    monkeypatch.setattr(sharding_module, "_rows_only", broken)
    sharding = NamedSharding(make_mesh((4,), ("b",), False), P("b", None))
    inputs = puff_inputs(rng, rows=36, horizon=10)  # a shape compiled nowhere else
    args = [jax.device_put(x, sharding) for x in inputs]
    with pytest.warns(RuntimeWarning, match=r"_partition failed \(KeyError\('planted'\)\).*replicated"):
        out = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS))(*args)
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5


@four_devices
def test_sharding_without_a_mesh_is_computed_replicated(rng):
    """Shardings that name no mesh (GSPMDSharding, JAX-internal) cannot be read as
    rows: puffadv asks for replicated operands, which XLA gathers. Right numbers."""
    try:
        from jax._src.sharding_impls import GSPMDSharding
    except ImportError:
        pytest.skip("this jax has no GSPMDSharding")
    rows = NamedSharding(make_mesh((4,), ("b",), False), P("b", None))
    meshless = GSPMDSharding(tuple(jax.devices("cpu")[:4]), rows._to_xla_hlo_sharding(2))
    inputs = puff_inputs(rng)
    args = [jax.device_put(x, meshless) for x in inputs]
    f = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS), in_shardings=(meshless,) * 4)
    assert "all-gather" in collectives(f, *args)
    assert reference.relative_error(f(*args), reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5


# ----------------------------------------------------------------- standard conventions


KINDS = {"gae": ("gae_lambda", pjax.gae), "td_lambda": ("lambda_", pjax.td_lambda_returns),
         "vtrace": ("lambda_", pjax.vtrace)}
OPTIONS = {"last_value": ("last_value",),
           "truncated+importance": ("truncated", "bootstrap_values", "importance")}


@four_devices
@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_conventions_keep_batch_sharding(rng, kind, option, time_axis, explicit):
    """[B, T] data sharded over B (axis 0), or [T, B] data (time_axis=0) sharded over
    B (axis 1): no collective, outputs sharded like the inputs."""
    mesh = make_mesh((2, 2), ("x", "y"), explicit)
    batch = ("x", "y")
    matrix = NamedSharding(mesh, P(batch, None) if time_axis == -1 else P(None, batch))
    vector = NamedSharding(mesh, P(batch))
    e = reference.random_episodes(rng, 32, 20)
    names = ("rewards", "values", "terminated") + OPTIONS[option]
    data = {k: (e[k].T if time_axis == 0 and e[k].ndim == 2 else e[k]) for k in names}
    placed = {k: jax.device_put(v, matrix if v.ndim == 2 else vector) for k, v in data.items()}
    lambda_name, function = KINDS[kind]
    required = ("rewards", "values", "terminated", "truncated")

    def call(placed):
        kwargs = {k: v for k, v in placed.items() if k not in required}
        out = function(*(placed[k] for k in required if k in placed), gamma=0.97,
                       **{lambda_name: 0.9}, time_axis=time_axis, **kwargs)
        return tuple(out[:2])

    f = jax.jit(call)
    assert collectives(f, placed) == []
    first, second = f(placed)
    for out in (first, second):
        assert_sharded_like(out, matrix)
    unsharded = call(data)
    assert np.array_equal(np.asarray(first), np.asarray(unsharded[0]))
    if kind == "vtrace":  # VTraceEstimate(vs, pg_advantages): compare as (pg, vs)
        first, second = second, first
    if time_axis == 0:
        first, second = first.T, second.T
    ref = reference.standard_estimate(kind, e["rewards"], e["values"], e["terminated"], gamma=0.97,
                                      lam=0.9, **{k: e[k] for k in OPTIONS[option]})
    assert reference.relative_error(first, ref[0]) <= 1e-5
    assert reference.relative_error(second, ref[1]) <= 1e-5


FAMILY = ("discounted/bootstrap_values", "n_step/3", "retrace/log_probs", "q_lambda/watkins",
          "episodic_cumsum/starts_at+seed", "eligibility_traces")


@four_devices
@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
@pytest.mark.parametrize("variant", FAMILY)
def test_estimator_family_keeps_batch_sharding(rng, variant, explicit):
    """Discounted returns, n-step returns, Retrace, Q(lambda) and the episodic sums
    are rows of the same call: batch-sharded in, no collective, sharded out."""
    from test_family import VARIANTS
    fn, args, kw, params, want = VARIANTS[variant](reference.random_off_policy(rng, 32, 20))
    fn = getattr(pjax, fn.__name__)
    mesh = make_mesh((2, 2), ("x", "y"), explicit)
    matrix, vector = NamedSharding(mesh, P(("x", "y"), None)), NamedSharding(mesh, P(("x", "y")))
    positional = [a for a in args if a is not None]  # a None truncated is last: nothing after it
    keywords = {k: v for k, v in kw.items() if v is not None}
    place = lambda x: jax.device_put(x, matrix if x.ndim == 2 else vector)

    def call(positional, keywords):
        out = fn(*positional, **keywords, **params, time_axis=-1)
        return (out,) if fn.__name__ in ("episodic_cumsum", "eligibility_traces") else (out.returns,)

    f = jax.jit(call)
    placed = ([place(a) for a in positional], {k: place(v) for k, v in keywords.items()})
    assert collectives(f, *placed) == []
    (out,) = f(*placed)
    assert_sharded_like(out, matrix)
    assert np.array_equal(np.asarray(out), np.asarray(call(positional, keywords)[0]))
    assert reference.relative_error(out, want["out" if "out" in want else "returns"]) <= 1e-5


@four_devices
def test_conventions_refuse_explicit_sharded_time_axis(rng):
    mesh = make_mesh((4,), ("t",), True)
    e = reference.random_episodes(rng, 8, 16)
    rewards, values, terminated = (jax.device_put(e[k].T, NamedSharding(mesh, P("t", None)))
                                   for k in ("rewards", "values", "terminated"))
    with pytest.raises(ValueError, match=r"puffadv.jax.gae: rewards is sharded along its time axis "
                                         r"\(axis 0, time_axis=0\)"):
        pjax.gae(rewards, values, terminated, last_value=e["last_value"], time_axis=0)


@four_devices
def test_conventions_vmap_over_sharded_rows(rng):
    mesh = make_mesh((4,), ("b",), False)
    parts = [reference.random_episodes(rng, 16, 12) for _ in range(3)]
    stacked = {k: np.stack([p[k] for p in parts]) for k in parts[0]}
    matrix, vector = NamedSharding(mesh, P(None, "b", None)), NamedSharding(mesh, P(None, "b"))
    args = [jax.device_put(stacked[k], matrix) for k in ("rewards", "values", "terminated")]
    args.append(jax.device_put(stacked["last_value"], vector))
    f = jax.jit(jax.vmap(lambda r, v, t, lv: pjax.vtrace(r, v, t, last_value=lv, time_axis=-1).vs))
    assert collectives(f, *args) == []
    vs = f(*args)
    assert_sharded_like(vs, matrix)
    for b, p in enumerate(parts):
        ref = reference.standard_estimate("vtrace", p["rewards"], p["values"], p["terminated"],
                                          last_value=p["last_value"], gamma=0.99, lam=1.0)[1]
        assert reference.relative_error(vs[b], ref) <= 1e-5


# ----------------------------------------------------------------- two GPUs (issue 19)


def _gpus():
    try:
        return jax.devices("gpu")
    except RuntimeError:  # no GPU backend in this jaxlib
        return []


@pytest.mark.skipif(len(_gpus()) < 2, reason="needs two GPUs (scripts/gpu/80-multi-gpu.sh)")
def test_two_gpus_keep_row_sharding(rng):
    """The GPU handlers behind the same partitioning: each GPU computes its rows."""
    mesh = Mesh(np.array(_gpus()[:2]), ("rows",))
    sharding = NamedSharding(mesh, P("rows", None))
    inputs = puff_inputs(rng, rows=4096, horizon=128)
    args = [jax.device_put(x, sharding) for x in inputs]
    f = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS))
    assert collectives(f, *args) == []
    out = f(*args)
    assert_sharded_like(out, sharding)
    one_gpu = f(*[jax.device_put(x, _gpus()[0]) for x in inputs])
    assert reference.relative_error(out, one_gpu) <= 1e-6
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5

    e = reference.random_episodes(rng, 4096, 64)
    batch = NamedSharding(mesh, P(None, "rows"))
    placed = [jax.device_put(e[k].T, batch) for k in ("rewards", "values", "terminated")]
    gae = jax.jit(lambda r, v, t, lv: pjax.gae(r, v, t, last_value=lv, time_axis=0).advantages)
    args = (*placed, jax.device_put(e["last_value"], NamedSharding(mesh, P("rows"))))
    assert collectives(gae, *args) == []
    out = gae(*args)
    assert_sharded_like(out, batch)
    ref = reference.standard_estimate("gae", e["rewards"], e["values"], e["terminated"],
                                      last_value=e["last_value"], gamma=0.99, lam=0.95)[0]
    assert reference.relative_error(out.T, ref) <= 1e-5


@four_devices
@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_linear_recurrence_keeps_row_sharding_forward_and_backward(rng, explicit, reverse):
    """The scan and its vjp (one more scan over time slices of the same rows): no collective."""
    x, a, g = (rng.normal(size=(32, 20)).astype(np.float32) for _ in range(3))
    s = rng.normal(size=32).astype(np.float32)
    mesh = make_mesh((2, 2), ("x", "y"), explicit)
    matrix, vector = NamedSharding(mesh, P(("x", "y"), None)), NamedSharding(mesh, P(("x", "y")))
    forward = lambda x, a, s: pjax.linear_recurrence(x, a, seed=s, reverse=reverse, time_axis=1)  # noqa: E731
    backward = lambda x, a, s, g: jax.vjp(forward, x, a, s)[1](g)  # noqa: E731
    placed = (jax.device_put(x, matrix), jax.device_put(a, matrix), jax.device_put(s, vector))
    cotangent = jax.device_put(g, matrix)
    f, b = jax.jit(forward), jax.jit(backward)
    assert collectives(f, *placed) == []
    assert collectives(b, *placed, cotangent) == []
    y = f(*placed)
    assert_sharded_like(y, matrix)
    assert np.array_equal(np.asarray(y), np.asarray(forward(x, a, s)))
    grads = b(*placed, cotangent)
    for got, want, sharding in zip(grads, backward(x, a, s, g), (matrix, matrix, vector)):
        assert_sharded_like(got, sharding)
        assert np.array_equal(np.asarray(got), np.asarray(want))
