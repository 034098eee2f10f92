"""Fixtures shared by the test files: one tiny PPO run, trained once per test process."""

import pytest

SEEDS = 2


@pytest.fixture(scope="session")
def ppo_run_dir(tmp_path_factory):
    """A ``lamella train``-style run directory (metrics, config.json, checkpoints) of PPO on
    CartPole-v1: 3 iterations, 2 seeds. ``lamella eval checkpoints`` and ``lamella eval report``
    read it; nothing writes to it after this fixture."""
    from lamella.agents.config import resolve_config
    from lamella.agents.driver import run_experiment

    config = resolve_config(
        "ppo",
        env_id="CartPole-v1",
        overrides=[
            "num_envs=4",
            "num_steps=16",
            "total_timesteps=192",  # 3 iterations
            "num_minibatches=2",
            "num_epochs=1",
            "hidden_sizes=16",
            "eval_episodes=2",
        ],
    )
    out = tmp_path_factory.mktemp("ppo_run")
    run_experiment(config, seeds=SEEDS, out_dir=out, progress=False, plot=False, chunk_iterations=3)
    return str(out)
