"""Network shapes, recurrent resets at episode boundaries, and action distributions."""

import flax.linen
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents import distributions, networks
from lamella.agents.testing import scan_unrolls, sub_jaxprs
from lamella.envs import spaces


def test_mlp_and_cnn_shapes():
    mlp = networks.MLP((8, 4), "relu")
    params = mlp.init(jax.random.key(0), jnp.zeros((3, 5)))
    assert mlp.apply(params, jnp.ones((3, 5))).shape == (3, 4)
    cnn = networks.MinAtarCNN(features=4, hidden_size=16)
    obs = jnp.ones((2, 6, 10, 10, 4))
    params = cnn.init(jax.random.key(0), obs)
    assert cnn.apply(params, obs).shape == (2, 6, 16)


@pytest.mark.parametrize("plain", [False, True])  # a wide layer's x^T g: from a copy of x^T, or plain
@pytest.mark.parametrize("features", [6, 2])  # kernel gradient from x^T (wide) or from g^T (narrow)
def test_dense_is_flax_dense_with_the_same_parameters_values_and_gradients(features, plain, monkeypatch):
    # Each form of the wide layer's kernel gradient (the CPU takes the plain one from jax 0.12 on).
    monkeypatch.setattr(networks, "plain_wide_kernel_gradient", lambda: plain)
    # (batch, agents, F) input: the leading axes are folded and restored.
    x = jax.random.normal(jax.random.key(1), (4, 3, 5))
    fast, flax_dense = (
        networks.Dense(features, kernel_init=networks.orthogonal(1.0)),
        flax.linen.Dense(features, kernel_init=networks.orthogonal(1.0)),
    )
    params = fast.init(jax.random.key(0), x)
    flax_params = flax_dense.init(jax.random.key(0), x)
    assert jax.tree.structure(params) == jax.tree.structure(flax_params)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(flax_params), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(fast.apply(params, x), flax_dense.apply(params, x), rtol=1e-6, atol=1e-6)

    def loss(module):
        return lambda p, x: jnp.sum(jnp.sin(module.apply(p, x)) * jnp.arange(float(features)))

    grads = jax.grad(loss(fast), argnums=(0, 1))(params, x)
    flax_grads = jax.grad(loss(flax_dense), argnums=(0, 1))(params, x)
    barriers = str(jax.make_jaxpr(jax.grad(loss(fast)))(params, x)).count("optimization_barrier")
    assert barriers == (2 if features < 5 else 0 if plain else 1), barriers
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(flax_grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if features == 2:
        return
    # The opt-in MLP has the default MLP's parameter names and values.
    mlp_params = networks.MLP((8, 4), fast_gradient=True).init(jax.random.key(0), x)
    default_params = networks.MLP((8, 4)).init(jax.random.key(0), x)
    assert jax.tree.structure(mlp_params) == jax.tree.structure(default_params)
    for a, b in zip(jax.tree.leaves(mlp_params), jax.tree.leaves(default_params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_plain_kernel_gradient_is_chosen_on_the_cpu_from_jax_0_12(monkeypatch):
    release = tuple(int(part) for part in jax.__version__.split(".")[:2])
    assert networks.plain_wide_kernel_gradient() == (release >= (0, 12))  # the tests run on the CPU
    monkeypatch.setattr(jax, "__version__", "0.12.0.1")
    assert networks.plain_wide_kernel_gradient()
    monkeypatch.setattr(jax, "__version__", "0.11.2")
    assert not networks.plain_wide_kernel_gradient()
    monkeypatch.setattr(jax, "__version__", "0.13.0rc1")  # a pre-release's version still parses
    assert networks.plain_wide_kernel_gradient()
    monkeypatch.setattr(jax, "__version__", "0.12.0.1")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")  # measured with the copy there
    assert not networks.plain_wide_kernel_gradient()


def test_unknown_activation_and_cell_raise():
    with pytest.raises(ValueError, match="activation"):
        networks.MLP((4,), "swoosh").init(jax.random.key(0), jnp.zeros((1, 2)))
    with pytest.raises(ValueError, match="cell"):
        networks.zero_carry("rnn", 2, 3)


@pytest.fixture(scope="module", params=["gru", "lstm"])
def core(request):
    module = networks.RecurrentCore(request.param, hidden_size=6)
    x = jnp.zeros((1, 2, 3))
    params = module.init(jax.random.key(0), module.initialize_carry(2), (x, jnp.zeros((1, 2), bool)))
    return module, params, jax.jit(module.apply)


def test_recurrent_core_resets_exactly_at_episode_boundary(core):
    module, params, apply = core
    batch, first_len, second_len = 2, 3, 4
    x = jax.random.normal(jax.random.key(1), (first_len + second_len, batch, 3))
    reset = jnp.zeros((first_len + second_len, batch), bool).at[first_len].set(True)
    # A non-zero carry from some earlier episode: the reset at step 0 must discard it too.
    stale = jax.tree.map(lambda c: c + 0.7, module.initialize_carry(batch))
    reset = reset.at[0].set(True)
    _, together = apply(params, stale, (x, reset))
    no_reset = lambda n: jnp.zeros((n, batch), bool)  # noqa: E731
    _, first = apply(params, module.initialize_carry(batch), (x[:first_len], no_reset(first_len)))
    _, second = apply(params, module.initialize_carry(batch), (x[first_len:], no_reset(second_len)))
    np.testing.assert_allclose(together, jnp.concatenate([first, second]), rtol=1e-6, atol=1e-6)
    # Without the reset flag the second episode would see the first one's carry.
    _, leaked = apply(params, stale, (x, jnp.zeros_like(reset)))
    assert not np.allclose(leaked[first_len:], second, atol=1e-4)


def test_recurrent_core_resets_per_batch_entry(core):
    module, params, apply = core
    x = jax.random.normal(jax.random.key(2), (4, 2, 3))
    reset = jnp.zeros((4, 2), bool).at[2, 1].set(True)  # only env 1 starts an episode at t=2
    carry0 = module.initialize_carry(2)
    _, ys = apply(params, carry0, (x, reset))
    _, ys_env0 = apply(params, carry0, (x, jnp.zeros_like(reset)))
    np.testing.assert_allclose(ys[:, 0], ys_env0[:, 0], rtol=1e-6, atol=1e-6)
    _, ys_env1_fresh = apply(params, carry0, (x[2:], jnp.zeros((2, 2), bool)))
    np.testing.assert_allclose(ys[2:, 1], ys_env1_fresh[:, 1], rtol=1e-6, atol=1e-6)


def test_recurrent_core_unrolls_only_on_an_accelerator_when_asked_with_the_same_values(monkeypatch):
    """``RecurrentCore``'s scan over a sequence runs ``_unroll.RECURRENT_UNROLL`` steps per loop
    iteration on a GPU or TPU (1, rolled, as shipped) and stays rolled on the CPU whatever it says.
    Unrolled, the outputs, the final carry and the gradient through time are those of the rolled
    scan but for float rounding. The backend is faked (the choice reads ``jax.default_backend()``
    when the module is set up), and the unrolled program runs here, on the CPU."""
    from lamella.agents import _unroll

    steps, batch = 19, 3  # 19: the last loop iteration of an 8-step unroll is a partial one
    x = jax.random.normal(jax.random.key(4), (steps, batch, 3))
    reset = jax.random.bernoulli(jax.random.key(5), 0.2, (steps, batch)).at[0].set(True)
    assert np.asarray(reset[1:]).any(), "a reset must fall inside the sequence"

    def make_run():
        # A module instance keeps the scan it first traced with: a fresh one per setting.
        module = networks.RecurrentCore("lstm", hidden_size=5)  # a carry of two arrays
        carry = jax.tree.map(lambda c: c + 0.3, module.initialize_carry(batch))

        def loss(params, x):
            final, ys = module.apply(params, carry, (x, reset))
            return jnp.sum(jnp.sin(ys)) + sum(jnp.sum(c**2) for c in jax.tree.leaves(final)), (final, ys)

        def run(params, x):
            (_, outputs), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(params, x)
            return outputs, grads

        return module.init(jax.random.key(0), carry, (x, reset)), run

    assert _unroll.RECURRENT_UNROLL == 1  # shipped: rolled until measured on an accelerator
    monkeypatch.setattr(_unroll, "RECURRENT_UNROLL", 8)
    params, run = make_run()
    assert scan_unrolls(run, params, x) == [1, 1]  # on the CPU: the forward and backward scans
    rolled = jax.jit(run)(params, x)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    params, run = make_run()
    assert scan_unrolls(run, params, x) == [8, 8]
    unrolled = jax.jit(run)(params, x)
    for a, b in zip(jax.tree.leaves(unrolled), jax.tree.leaves(rolled), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(_unroll, "RECURRENT_UNROLL", 1)
    params, run = make_run()
    assert scan_unrolls(run, params, x) == [1, 1]


def test_recurrent_core_rejects_bad_shapes(core):
    module, params, _ = core
    with pytest.raises(ValueError, match="time, batch"):
        module.apply(params, module.initialize_carry(2), (jnp.zeros((2, 3)), jnp.zeros((2,), bool)))


def test_categorical():
    dist = distributions.Categorical(jnp.log(jnp.array([[0.2, 0.8], [0.5, 0.5]])))
    np.testing.assert_allclose(dist.log_prob(jnp.array([1, 0])), np.log([0.8, 0.5]), rtol=1e-6)
    np.testing.assert_allclose(dist.entropy()[1], np.log(2), rtol=1e-6)
    np.testing.assert_array_equal(dist.mode(), [1, 0])
    samples = jax.vmap(dist.sample)(jax.random.split(jax.random.key(0), 4000))
    np.testing.assert_allclose(samples[:, 0].mean(), 0.8, atol=0.03)


@pytest.mark.parametrize("kind", ["Categorical", "MultiCategorical"])
def test_categorical_log_prob_is_the_gathered_entry_and_its_gradient_has_no_scatter(kind):
    """``log_prob`` picks the chosen entry of ``log_softmax`` by a one-hot select: the values and
    gradients of a gather, without the gather's scatter in the gradient (on a GPU that scatter
    and a softmax of its own were an eighth of IPPO's update)."""
    dist_class = getattr(distributions, kind)
    logits = jax.random.normal(jax.random.key(0), (6, 3, 5))
    raw = jax.random.randint(jax.random.key(1), (6, 3), 0, 5)

    def gathered(logits):
        chosen = jnp.take_along_axis(jax.nn.log_softmax(logits), raw[..., None], axis=-1)[..., 0]
        return chosen if kind == "Categorical" else chosen.sum(-1)

    def picked(logits):
        return dist_class(logits).log_prob(raw)

    np.testing.assert_array_equal(picked(logits), gathered(logits))
    weights = jnp.arange(1.0, 1.0 + gathered(logits).size).reshape(gathered(logits).shape)
    grad_of = lambda fn: jax.grad(lambda logits: jnp.sum(weights * fn(logits)))  # noqa: E731
    np.testing.assert_allclose(grad_of(picked)(logits), grad_of(gathered)(logits), rtol=1e-6, atol=1e-7)

    def primitives(fn):
        found = set()

        def visit(jaxpr):
            for eqn in jaxpr.eqns:
                found.add(eqn.primitive.name)
                for sub in sub_jaxprs(eqn.params):
                    visit(sub)

        visit(jax.make_jaxpr(fn)(logits).jaxpr)
        return found

    assert "scatter-add" in primitives(grad_of(gathered))  # what the gather would have cost
    assert not {"gather", "scatter-add", "scatter"} & primitives(grad_of(picked))


def head_for(space, squash="tanh"):
    head = distributions.ActionHead(space, squash)
    params = head.init(jax.random.key(0), jnp.zeros((5, 3)))
    return head.apply(params, jax.random.normal(jax.random.key(1), (5, 3)))


def test_multidiscrete_head_masks_invalid_choices():
    space = spaces.MultiDiscrete([2, 4])
    dist = head_for(space)
    actions = jax.vmap(dist.sample)(jax.random.split(jax.random.key(2), 500))
    assert actions.shape == (500, 5, 2)
    assert bool(jnp.all(jax.vmap(jax.vmap(space.contains))(actions)))
    # Probabilities of each sub-action sum to one over its valid choices only.
    probs = jnp.exp(jax.nn.log_softmax(dist.logits))
    np.testing.assert_allclose(probs[:, 0, :2].sum(-1), 1.0, rtol=1e-5)
    assert np.isfinite(np.asarray(dist.entropy())).all()


@pytest.mark.parametrize("squash", ["tanh", "clip"])
def test_gaussian_actions_in_bounds_and_log_prob_is_a_density(squash):
    space = spaces.Box(-2.0, 2.0, (1,))
    dist = head_for(space, squash)
    raw = dist.sample(jax.random.key(3))
    action = dist.to_action(raw)
    assert action.shape == (5, 1) and bool(jnp.all((action >= -2) & (action <= 2)))
    # Integrate the density of the action over [-2, 2] for the first batch entry.
    one = jax.tree.map(lambda x: x[:1] if jnp.ndim(x) == 2 else x, dist)
    if squash == "tanh":
        # Density of the squashed action: exp(log_prob(u)) with a = f(u); integrate over a.
        a = jnp.linspace(-2 + 1e-4, 2 - 1e-4, 20001)[:, None]
        u = jnp.arctanh(a / 2)
        density = jnp.exp(jax.vmap(lambda ui: one.log_prob(ui[None])[0])(u))
        np.testing.assert_allclose(jnp.trapezoid(density, a[:, 0]), 1.0, atol=2e-3)
    else:
        u = jnp.linspace(-12, 12, 20001)[:, None]
        density = jnp.exp(jax.vmap(lambda ui: one.log_prob(ui[None])[0])(u))
        np.testing.assert_allclose(jnp.trapezoid(density, u[:, 0]), 1.0, atol=2e-3)


def test_unsupported_action_spaces_raise():
    with pytest.raises(TypeError, match="Unsupported action space"):
        distributions.check_action_space(spaces.Tuple([spaces.Discrete(2)]))
    with pytest.raises(ValueError, match="bounded"):
        distributions.check_action_space(spaces.Box(-np.inf, np.inf, (2,)), "tanh")
    distributions.check_action_space(spaces.Box(-np.inf, np.inf, (2,)), "clip")


def test_hashed_keys_are_fresh_and_chain_from_the_zero_key():
    from lamella.agents.runner import hashed_keys

    key = jax.random.key(0)
    seen = set()
    for _ in range(20):
        keys = hashed_keys(key, (4,))
        seen.update(tuple(np.asarray(jax.random.key_data(k))) for k in keys)
        key = keys[0]
    assert len(seen) == 80
    uniforms = jax.vmap(jax.random.uniform)(hashed_keys(jax.random.key(1), (20000,)))
    np.testing.assert_allclose(uniforms.mean(), 0.5, atol=0.01)
    np.testing.assert_allclose(uniforms.std(), np.sqrt(1 / 12), atol=0.01)


@pytest.mark.parametrize("n", [1, 2, 5, 1000, 4096, 2**16, 2**16 + 1])
def test_hashed_permutation_is_the_argsort_of_its_hashed_words(n):
    """Up to 2**16 elements the permutation comes from a sort of words with the index packed in
    their low bits plus exchange passes for neighbours equal in the high bits; it must be the
    stable argsort of the words exactly (at 2**16 about 32,000 such pairs per draw, so the
    passes are exercised), vmapped as in PPO's update; above 2**16 it is that argsort."""
    from lamella.agents.runner import hashed_permutation
    from lamella.envs import random as fast_random

    keys = jax.random.split(jax.random.key(n), 4)
    orders = np.asarray(jax.jit(jax.vmap(lambda key: hashed_permutation(key, n)))(keys))
    for key, order in zip(keys, orders, strict=True):
        words = fast_random.bits(jax.random.key_data(key), (n,), stream=2, vector=True)
        assert order.dtype == np.int32
        np.testing.assert_array_equal(order, np.argsort(np.asarray(words), kind="stable"))
    if n > 2:
        assert len({order.tobytes() for order in orders}) == len(orders)


@pytest.mark.parametrize("shape", [(4, 64), (64, 64), (64, 2), (3, 3, 8, 16)])
def test_orthogonal_init_matches_flax_and_needs_no_lapack(shape):
    """lamella's orthogonal initializer draws what flax's does (same key, to float32 precision),
    is orthogonal, and under vmap over seeds compiles to plain operations: jaxlib 0.10.2's batched
    LAPACK QR kernel can deadlock the CPU thread pool on a 2-core machine.

    Float32 precision for two QR factorisations of an n x n draw is a rounding error of order
    n * eps * gain per entry (entries of a different draw differ by ~gain / sqrt(n), 10^4 times
    more): jax 0.10.2 / flax 0.12 agree within 1e-6, jax 0.7 / flax 0.10 within 1.6e-6 at n = 64."""
    key = jax.random.key(3)
    ours = networks.orthogonal(2.0)(key, shape)
    tolerance = 2.0 * max(shape[-1], int(np.prod(shape[:-1]))) * np.finfo(np.float32).eps
    np.testing.assert_allclose(ours, flax.linen.initializers.orthogonal(2.0)(key, shape), atol=tolerance)
    matrix = np.asarray(ours, np.float64).reshape(-1, shape[-1]) / 2.0
    gram = matrix.T @ matrix if matrix.shape[0] >= matrix.shape[1] else matrix @ matrix.T
    np.testing.assert_allclose(gram, np.eye(len(gram)), atol=1e-5)
    batched = jax.jit(jax.vmap(lambda k: networks.orthogonal()(k, shape)))
    hlo = batched.lower(jax.random.split(key, 3)).as_text()
    assert "custom_call" not in hlo, "the vmapped initializer calls a custom kernel (LAPACK?)"


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_recurrent_core_init_needs_no_lapack_under_vmap(cell):
    """The GRU/LSTM recurrent kernels use lamella's orthogonal initializer (flax's default is the
    LAPACK one whose batched CPU kernel can deadlock)."""
    core = networks.RecurrentCore(cell, 8)
    carry = networks.zero_carry(cell, 2, 8)
    inputs = (jnp.zeros((3, 2, 4)), jnp.zeros((3, 2), bool))
    init = jax.jit(jax.vmap(lambda k: core.init(k, carry, inputs)))
    assert "custom_call" not in init.lower(jax.random.split(jax.random.key(0), 3)).as_text()


def test_view_cnn_convolves_the_view_inside_the_row_and_joins_the_rest():
    # A row of 3 values, a 4 x 4 x 2 view (32), then 2 values: D = 37.
    cnn = networks.ViewCNN((4, 4, 2), view_start=3, features=5)
    x = jax.random.normal(jax.random.key(0), (2, 3, 37))
    params = cnn.init(jax.random.key(1), x)
    kernel, bias = params["params"]["Conv_0"]["kernel"], params["params"]["Conv_0"]["bias"]
    assert kernel.shape == (3, 3, 2, 5) and bias.shape == (5,)
    y = cnn.apply(params, x)
    assert y.shape == (2, 3, 4 * 4 * 5 + 3 + 2)
    # By hand: the view back out of the row (row-major), a SAME 3 x 3 convolution, ReLU, flattened,
    # then the values before the view, then those after it.
    view = x[..., 3:35].reshape(6, 4, 4, 2)
    conv = jax.lax.conv_general_dilated(
        view, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    expected = jnp.concatenate([jax.nn.relu(conv + bias).reshape(2, 3, -1), x[..., :3], x[..., 35:]], -1)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"does not fit in rows of 30"):
        cnn.apply(params, jnp.zeros((1, 30)))


def test_view_cnn_actor_critic_shapes_parameters_and_refusals():
    from lamella.agents.ppo import PPOConfig, make_actor_critic, make_ppo

    # Pax's IPD-in-the-Matrix shape: 6 inventory values, then the 5 x 5 x 10 view; 5 actions.
    config = PPOConfig(torso="view_cnn", view_shape=(5, 5, 10), view_start=6, hidden_sizes=())
    actor_critic = make_actor_critic(config, spaces.Discrete(5))
    params = actor_critic.init(jax.random.key(0), jnp.zeros((1, 256)))
    conv = 3 * 3 * 10 * 16 + 16  # one 3 x 3 convolution of 16 channels (actor and critic each)
    features = 5 * 5 * 16 + 6  # 406: the flattened convolution and the inventory
    assert sum(x.size for x in jax.tree.leaves(params)) == 2 * conv + (features * 5 + 5) + (features + 1)
    _, dist, value = actor_critic.step(params, (), jnp.ones((4, 256)), jnp.zeros((4,), bool))
    assert dist.logits.shape == (4, 5) and value.shape == (4,)
    with pytest.raises(ValueError, match=r"torso='view_cnn' needs view_shape=\(H, W, C\)"):
        PPOConfig(torso="view_cnn").validate()
    with pytest.raises(ValueError, match=r"this observation has shape \(100,\).*use torso='mlp'"):
        make_ppo(config, spaces.Box(0.0, 1.0, (100,)), spaces.Discrete(5))


def test_uniform_policy_zeroes_the_action_head_only():
    """``testing.uniform_policy``: the baseline learning tests beat. Every logit of the zeroed
    network is 0 (a uniform distribution), the value and the torso are untouched, and a tree
    without an action head is refused rather than returned as is."""
    from lamella.agents.actor_critic import FeedForwardActorCriticNet, feedforward_actor_critic
    from lamella.agents.testing import uniform_policy

    actor_critic = feedforward_actor_critic(FeedForwardActorCriticNet(spaces.Discrete(4), hidden_sizes=(8,)))
    obs = jax.random.normal(jax.random.key(1), (5, 3))
    params = actor_critic.init(jax.random.key(0), obs)
    uniform = uniform_policy(params)
    reset = jnp.zeros((5,), bool)
    (_, dist, value), (_, dist_uniform, value_uniform) = (
        actor_critic.step(p, (), obs, reset) for p in (params, uniform)
    )
    np.testing.assert_array_equal(dist_uniform.logits, np.zeros((5, 4)))
    assert np.abs(np.asarray(dist.logits)).max() > 0
    np.testing.assert_array_equal(value_uniform, value)
    zeroed = [
        jax.tree_util.keystr(path)
        for (path, a), b in zip(
            jax.tree_util.tree_leaves_with_path(params), jax.tree.leaves(uniform), strict=True
        )
        if not np.array_equal(a, b)
    ]
    assert zeroed and all("ActionHead_0" in path or "'head'" in path for path in zeroed), zeroed
    with pytest.raises(ValueError, match="no parameter under"):
        uniform_policy({"params": {"torso": {"kernel": jnp.ones((2, 2))}}})
