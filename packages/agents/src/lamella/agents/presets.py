"""Tuned configurations per algorithm and environment.

``PRESETS[algorithm][env_id]`` is a config instance; override fields with
``dataclasses.replace(PRESETS["ppo"]["CartPole-v1"], learning_rate=1e-3)``.
Presets for environments that are not registered yet are plain configs too:
they work as soon as the environment id exists.

:data:`PPO` and :data:`ES` are the :class:`~lamella.agents.algorithms.Algorithm` entries that
lamella-agents declares in the ``lamella.algorithms`` entry-point group (the off-policy ones are
in :mod:`lamella.agents.offpolicy.presets`).
"""

from __future__ import annotations

from typing import Any

from lamella.agents.algorithms import Algorithm
from lamella.agents.es import ESConfig, make_es_runner
from lamella.agents.ppo import PPOConfig, make_ppo_runner

__all__ = ["ES", "PPO", "PRESETS"]

#: The ES search of the Brax bodies' presets: SNES over 64 members, each playing one 1000-step
#: episode per generation, observations standardised by running statistics.
_BRAX_ES: dict[str, Any] = dict(
    strategy="SNES",
    population_size=64,
    num_rollouts=1,
    max_episode_steps=1000,
    eval_episodes=4,
    normalize_observations=True,
)

PRESETS: dict[str, dict[str, Any]] = {
    "ppo": {
        # Clip range 0.1: final greedy return >= 468 for 24 of 24 seeds (23 at >= 475) in a
        # sweep after 2e5 steps; with 0.2, 2 seeds in 24 ended at 244 and 259 (a late unlearning).
        # No entropy bonus: with 0.01 one seed in six unlearned late. 8 envs (twice the updates
        # for the same steps): greedy return >= 475 for 192 of 192 seeds (2026-12-01: jax 0.12
        # 72 + 24 seeds, 0.10.2 72, 0.7.0 24; min 487.2); with 16 envs 1 to 2 seeds in 24 ended
        # below 475 on each of those jax versions (min 416.2).
        "CartPole-v1": PPOConfig(
            env_id="CartPole-v1", total_timesteps=200_000, num_envs=8, ent_coef=0.0, clip_eps=0.1
        ),
        "Acrobot-v1": PPOConfig(env_id="Acrobot-v1", total_timesteps=500_000, normalize_observations=True),
        # Greedy return -138 .. -157 for 8 of 8 seeds (gamma 0.9 and 0.95) after 6e5 steps; a
        # clipped Gaussian with log_std -0.5 left some seeds at -690 (never swinging up).
        "Pendulum-v1": PPOConfig(
            env_id="Pendulum-v1",
            total_timesteps=600_000,
            num_envs=16,
            num_steps=256,
            num_epochs=10,
            num_minibatches=16,
            learning_rate=1e-3,
            gamma=0.95,
            gae_lambda=0.95,
            ent_coef=0.0,
            normalize_observations=True,
            normalize_rewards=True,
            continuous_action="tanh",
            log_std_init=0.0,
        ),
        # Brax's inverted pendulum on the spring backend (lamella-envs[brax]); 1000-step episodes,
        # reward 1 per step, a uniformly random policy returns 23 on average (100 episodes, max 71).
        # Greedy return after 2e5 steps: 155 .. 912 over 16 runs of a sweep of learning rate
        # (3e-4, 1e-3), gamma (0.97, 0.99) and entropy bonus (0, 0.01); these settings: 511, 912.
        "brax:inverted_pendulum@spring": PPOConfig(
            env_id="brax:inverted_pendulum@spring",
            total_timesteps=200_000,
            num_envs=16,
            num_steps=64,
            num_epochs=8,
            num_minibatches=4,
            learning_rate=1e-3,
            gamma=0.97,
            ent_coef=0.0,
            hidden_sizes=(32, 32),
            normalize_observations=True,
            normalize_rewards=True,
            continuous_action="tanh",
            eval_episodes=4,
        ),
        # Brax's halfcheetah (spring backend): brax.training's own halfcheetah PPO settings (lr
        # 3e-4, gamma 0.95, entropy 1e-3, 8 epochs, observation normalisation, reward scale 1)
        # cut to a CPU budget (32 envs x 160 steps per update instead of 2048 envs x 160; (64, 64)
        # nets). Greedy return after 5e5 steps: 2041 in 200 s of wall time (1 seed, lamella
        # train's compile options); brax.training's ppo.train with the same settings: 1333 in
        # 452 s (benchmarks/brax_training.py; lamella-agents README, "Brax bodies").
        "brax:halfcheetah@spring": PPOConfig(
            env_id="brax:halfcheetah@spring",
            total_timesteps=500_000,
            num_envs=32,
            num_steps=160,
            num_epochs=8,
            num_minibatches=8,
            learning_rate=3e-4,
            anneal_lr=False,
            gamma=0.95,
            gae_lambda=0.95,
            clip_eps=0.3,
            clip_value=False,
            ent_coef=1e-3,
            hidden_sizes=(64, 64),
            normalize_observations=True,
            continuous_action="tanh",
            eval_episodes=8,
        ),
        # Brax's ant (spring backend), issue 19: brax.training's own ant PPO settings (lr 3e-4,
        # gamma 0.97, entropy 1e-2, 4 epochs, observation normalisation, clip 0.3) cut to a CPU
        # budget: 32 envs x 160 steps per update in 8 minibatches instead of 4096 envs and 2048 x
        # 32 x 5 steps, (64, 64) tanh nets instead of (32,)*4 / (256,)*5 swish, 3e5 steps instead
        # of 5e7, and reward scale 1 instead of 10 (lamella's PPO has no reward scale; both
        # normalise advantages). The policy's initial std is brax.training's (softplus(0) = 0.69,
        # log_std_init = log(0.693)). Greedy return after 3e5 steps, seeds 0-5: median 1198
        # (lamella's default std 1: 904) in 71 s of wall time; brax.training's ppo.train with the
        # same settings: 958 in 132 s (benchmarks/brax_training.py; lamella-agents README, "Brax
        # bodies").
        "brax:ant@spring": PPOConfig(
            env_id="brax:ant@spring",
            total_timesteps=300_000,
            num_envs=32,
            num_steps=160,
            num_epochs=4,
            num_minibatches=8,
            learning_rate=3e-4,
            anneal_lr=False,
            gamma=0.97,
            gae_lambda=0.95,
            clip_eps=0.3,
            clip_value=False,
            ent_coef=1e-2,
            hidden_sizes=(64, 64),
            normalize_observations=True,
            continuous_action="tanh",
            log_std_init=-0.3665,
            eval_episodes=8,
        ),
        "Breakout-MinAtar": PPOConfig(
            env_id="Breakout-MinAtar",
            total_timesteps=10_000_000,
            num_envs=64,
            num_steps=128,
            num_epochs=4,
            num_minibatches=8,
            learning_rate=5e-4,
            torso="cnn",
            activation="relu",
            eval_max_steps=1000,
        ),
        # 2.5e5 steps: greedy return 1.0 for all 12 seeds (keys 0-3, 3 seeds each) at 2.5e5 and
        # already at 1.5e5 (2026-11-30); 5e5 until then.
        "MemoryChain-bsuite": PPOConfig(
            env_id="MemoryChain-bsuite",
            total_timesteps=250_000,
            num_envs=32,
            num_steps=64,
            num_epochs=4,
            num_minibatches=4,
            learning_rate=1e-3,
            recurrent=True,
            cell="gru",
            rnn_hidden_size=64,
            ent_coef=0.01,
        ),
    },
    "es": {
        "CartPole-v1": ESConfig(env_id="CartPole-v1", strategy="SNES"),
        "Acrobot-v1": ESConfig(env_id="Acrobot-v1", strategy="SNES", total_timesteps=3_200_000),
        "Pendulum-v1": ESConfig(
            env_id="Pendulum-v1",
            strategy="Open_ES",
            population_size=64,
            num_rollouts=4,
            sigma_init=0.05,
            learning_rate=0.02,
            hidden_sizes=(32, 32),
            total_timesteps=20_000_000,
        ),
        "Breakout-MinAtar": ESConfig(
            env_id="Breakout-MinAtar",
            strategy="Open_ES",
            population_size=128,
            sigma_init=0.03,
            learning_rate=0.01,
            hidden_sizes=(64,),
            max_episode_steps=1000,
            total_timesteps=50_000_000,
        ),
        # Brax's inverted pendulum (spring backend): 30 generations of 64 members, one 1000-step
        # episode each, observations standardised by running statistics: greedy return 1000
        # for 9 of 12 seeds (the others 533, 873, 935). Without the standardisation the same
        # search ends near the untrained policy (116, 222, 121 for 3 seeds; the zero policy
        # balances for 91 steps): the balancing gains on the raw pole angle are in the tens
        # (benchmarks/brax_pendulum_linear_gains.py).
        "brax:inverted_pendulum@spring": ESConfig(
            env_id="brax:inverted_pendulum@spring", total_timesteps=1_920_000, **_BRAX_ES
        ),
        # Brax's half-cheetah (spring backend), issue 19: the pendulum's search for 50
        # generations (3.2e6 steps). Greedy return over 16 episodes 1775, 2156, 2016 (seeds 0-2);
        # OpenAI-ES (evosax's Open_ES, brax.training's algorithm) with matched settings 1195,
        # 1280, 1402 and brax.training's own es.train 889, 1203, -131 at the same budget
        # (benchmarks/brax_training.py --algo es; lamella-agents README, "Brax bodies").
        "brax:halfcheetah@spring": ESConfig(
            env_id="brax:halfcheetah@spring", total_timesteps=3_200_000, **_BRAX_ES
        ),
    },
}

#: ``lamella train ppo`` (entry point ``ppo = "lamella.agents.presets:PPO"``).
PPO = Algorithm(PPOConfig, make_ppo_runner, PRESETS["ppo"])
#: ``lamella train es`` (entry point ``es = "lamella.agents.presets:ES"``).
ES = Algorithm(ESConfig, make_es_runner, PRESETS["es"])
