"""Presets of the opponent-shaping runners, and the entry points ``lamella train shaping`` and ``mfos_es``.

``lamella train shaping --preset NAME [key=value ...]``:

=================================  ==================================================================
preset                             agents
=================================  ==================================================================
``ppo_v_tft``                      PPO vs tit-for-tat on Pax's IPD (also the ``IteratedPrisonersDilemma-v0``
                                   preset and the defaults); Pax's documented outcome: PPO learns ALL-C
``ppo_v_all_d``                    PPO vs ALL-D on the IPD; PPO learns ALL-D
``ppo_v_ppo``                      two PPO learners (naive learner vs naive learner) on the IPD; Pax's
                                   documented outcome: mutual defection
``ppo_v_ppo_coin_game``            two PPO learners on CoinGame (16-step episodes; also the
                                   ``CoinGame-v0`` preset)
``ppo_v_ppo_in_the_matrix``        two PPO learners on IPD-in-the-Matrix (152-step episodes; also the
                                   ``IPDInTheMatrix-v0`` preset)
``ppo_v_ppo_in_the_matrix_cnn``    the same with Pax's ipditm networks: the CNN on the view
                                   (``torso="cnn"``) and a GRU (PPO_memory)
=================================  ==================================================================

The IPD presets play 100-round episodes with Pax's payoff (CC -1, CD -3, DC 0, DD -2) and
discount 0.96; every preset sets only the agents, the env and the budget over
:class:`~lamella.marl.shaping.runner.ShapingConfig`'s PPO defaults.

``lola``: DiCE-LOLA and the naive sample-based learner (tabular memory-one policies) on Pax's
finite IPD (:mod:`lamella.marl.shaping.dice`); presets ``lola_v_lola`` (the default),
``nl_v_nl``, ``lola_v_nl`` and ``lola_v_tft``.

``mfos_es``: an M-FOS-style meta-agent evolved with OpenES against exact-gradient naive learners on
the infinite prisoner's dilemma (:mod:`lamella.marl.shaping.evolution`). The preset keeps Pax's
``ipd/mfos_nl`` scale where it is cheap (100 outer steps, discount 0.96, naive learners with
learning rate 1) and a population of 64 with 4 opponents per member for 500 generations.

``mfos_rl``: M-FOS with reinforcement learning, a PPO meta-agent against exact-gradient learners on
the infinite prisoner's dilemma (:mod:`lamella.marl.shaping.mfos`, Pax's ``ipd/inf_mfos_v_nl``);
presets ``mfos_v_nl`` (also ``InfiniteMatrixGame-v0``) and ``mfos_v_lola``. ``mfos_es`` has a
``mfos_v_nl`` preset too (its default), so both variants run as ``--preset mfos_v_nl``.

``meta_es``: a meta-agent evolved against PPO co-players that learn over inner episodes of the
finite prisoner's dilemma (:mod:`lamella.marl.shaping.meta`, Pax's ``evo`` runner). The
``IteratedPrisonersDilemma-v0`` preset is Good Shepherd's setup (a feed-forward meta-agent);
``shaper_v_ppo`` gives the meta-agent a GRU whose state persists across the inner episodes
(Shaper); ``good_shepherd_v_ppo_memory`` and ``shaper_v_ppo_memory`` are the two against
recurrent co-players (Pax's ``PPO_memory``: a GRU whose state starts afresh every inner episode;
any preset takes ``co_player_recurrent=true``). The same two setups on CoinGame (``good_shepherd_v_ppo_coin_game``,
``shaper_v_ppo_coin_game``, also the ``CoinGame-v0`` preset) and on IPD-in-the-Matrix
(``good_shepherd_v_ppo_in_the_matrix``, ``shaper_v_ppo_in_the_matrix``, also the
``IPDInTheMatrix-v0`` preset); ``shaping``'s ``ppo_v_ppo_in_the_matrix`` (also its
``IPDInTheMatrix-v0`` preset) is their naive-learner baseline. The Matrix presets with the suffix
``_cnn`` use Pax's ipditm networks: the CNN on the view (``torso="cnn"``, ``meta_torso="cnn"``)
and GRU co-players. Roles (``meta_roles``): ``good_shepherd_self_play`` (the meta-agent in
both seats of the IPD) and ``shaper_2_roles_v_ppo_3p`` (a Shaper in two seats of the 3-player
``IteratedTensorGame-v0`` against one PPO_memory co-player, Pax's ``3pl_2shap_ipd``); annealed
self-play (``self_play_anneal``): ``shaper_v_ppo_3p_self_play_anneal``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lamella.agents.algorithms import Algorithm
from lamella.marl.shaping.dice import DiceConfig, make_dice_runner
from lamella.marl.shaping.evolution import MetaESConfig, make_meta_es_runner
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner
from lamella.marl.shaping.mfos import MFOSConfig, make_mfos_runner
from lamella.marl.shaping.runner import LEARNER, ShapingConfig, make_shaping_runner

__all__ = ["LOLA", "META_ES", "MFOS_ES", "MFOS_RL", "PRESETS", "SHAPING", "SHAPING_PRESETS"]

_IPD = "IteratedPrisonersDilemma-v0"

SHAPING_PRESETS: dict[str, Any] = {
    "ppo_v_tft": ShapingConfig(env_id=_IPD, agents=(LEARNER, "tit_for_tat")),
    "ppo_v_all_d": ShapingConfig(env_id=_IPD, agents=(LEARNER, "all_d")),
    "ppo_v_ppo": ShapingConfig(env_id=_IPD, agents=(LEARNER, LEARNER)),
    "ppo_v_ppo_coin_game": ShapingConfig(
        env_id="CoinGame-v0",
        agents=(LEARNER, LEARNER),
        num_inner_steps=16,
        num_steps=16,
        num_envs=64,
        total_timesteps=1_024_000,
        hidden_sizes=(64, 64),
        learning_rate=3e-3,
        gamma=0.96,
    ),
}
SHAPING_PRESETS[_IPD] = SHAPING_PRESETS["ppo_v_tft"]
SHAPING_PRESETS["CoinGame-v0"] = SHAPING_PRESETS["ppo_v_ppo_coin_game"]
# Two naive PPO learners in IPD-in-the-Matrix (the baseline of the meta presets below): Pax's
# ipditm co-player settings (learning rate 0.005, 2 epochs, entropy 0.1) with an MLP on the
# flattened view and inventory, 152-step episodes.
SHAPING_PRESETS["ppo_v_ppo_in_the_matrix"] = ShapingConfig(
    env_id="IPDInTheMatrix-v0",
    agents=(LEARNER, LEARNER),
    num_inner_steps=152,
    num_steps=152,
    num_envs=16,
    total_timesteps=16 * 152 * 200,
    hidden_sizes=(64, 64),
    learning_rate=5e-3,
    num_epochs=2,
    num_minibatches=8,
    ent_coef=0.1,
    gamma=0.96,
)
SHAPING_PRESETS["IPDInTheMatrix-v0"] = SHAPING_PRESETS["ppo_v_ppo_in_the_matrix"]
# The same with Pax's ipditm/independent_learners networks: PPO_memory with the CNN on the view
# (16 channels, 3 x 3, the inventory joined after it), an 8-unit GRU, then 8-unit tanh layers for
# the policy and the value each (Pax's separate heads); 8 minibatches of 2 envs (whole episodes).
SHAPING_PRESETS["ppo_v_ppo_in_the_matrix_cnn"] = dataclasses.replace(
    SHAPING_PRESETS["ppo_v_ppo_in_the_matrix"],
    torso="cnn",
    recurrent=True,
    rnn_hidden_size=8,
    hidden_sizes=(8,),
)

PRESETS: dict[str, dict[str, Any]] = {
    "shaping": SHAPING_PRESETS,
    "mfos_es": {
        "InfiniteMatrixGame-v0": MetaESConfig(),
        "mfos_v_nl": MetaESConfig(),
        # Against LOLA instead of a naive learner.
        "mfos_es_vs_lola": MetaESConfig(opponent="lola"),
    },
    "mfos_rl": {
        "InfiniteMatrixGame-v0": MFOSConfig(),
        "mfos_v_nl": MFOSConfig(),
        "mfos_v_lola": MFOSConfig(opponent="lola"),
    },
    "meta_es": {
        _IPD: MetaConfig(env_id=_IPD),
        "good_shepherd_v_ppo": MetaConfig(env_id=_IPD),
        "shaper_v_ppo": MetaConfig(env_id=_IPD, meta_recurrent=True, meta_hidden_sizes=(16,)),
        # Pax's ipd/gs_v_ppo_mem and ipd/shaper_v_ppo_mem: the same against co-players with a
        # 16-unit GRU (PPO_memory); 2 minibatches of a co-player's 2 envs (whole inner episodes).
        # Adam 0.05: at the feed-forward co-players' 0.2, or 0.1, a GRU co-player on 2 envs often
        # locks into a deterministic policy (ALL-C against ALL-D on 2 of 3 seeds at 0.1; measured
        # against fixed tit-for-tat and ALL-D over 48 inner episodes), at 0.05 it did not.
        "good_shepherd_v_ppo_memory": MetaConfig(env_id=_IPD, co_player_recurrent=True, learning_rate=0.05),
        "shaper_v_ppo_memory": MetaConfig(
            env_id=_IPD,
            meta_recurrent=True,
            meta_hidden_sizes=(16,),
            co_player_recurrent=True,
            learning_rate=0.05,
        ),
    },
}

# CoinGame (Pax's cg/train_gs, cg/train_shaper at a laptop's budget): 16-step inner episodes, 48 per
# outer episode, two tabular PPO co-players per member on 8 envs each (Adam 0.1, 4 epochs, no
# entropy bonus: the settings of benchmarks/shaping_meta_coin_game.py); 100 generations.
_COIN_GAME = MetaConfig(
    env_id="CoinGame-v0",
    num_inner_steps=16,
    num_outer_steps=48,
    num_envs=16,
    num_opponents=2,
    hidden_sizes=(),
    learning_rate=0.1,
    num_epochs=4,
    ent_coef=0.0,
    population_size=16,
    eval_episodes=4,
    total_timesteps=100 * 16 * 16 * 16 * 48,
)
# IPD-in-the-Matrix (Pax's ipditm/train_gs, ipditm/train_shaper, smaller): 152-step inner episodes,
# 16 per outer episode, one PPO co-player per member on 4 envs with Pax's ipditm co-player settings
# (learning rate 0.005, 2 epochs, entropy 0.1; an MLP on the flattened view and inventory instead of
# Pax's CNN and GRU: the `_cnn` presets below have them), OpenES with Pax's sigma 0.075 and learning
# rate 0.05 (CMA-ES keeps an N x N covariance of the meta-agent's thousands of parameters: too slow
# here); 100 generations.
_IN_THE_MATRIX = MetaConfig(
    env_id="IPDInTheMatrix-v0",
    num_inner_steps=152,
    num_outer_steps=16,
    num_envs=4,
    num_opponents=1,
    hidden_sizes=(32,),
    learning_rate=5e-3,
    num_epochs=2,
    num_minibatches=8,
    ent_coef=0.1,
    strategy="Open_ES",
    sigma_init=0.075,
    es_learning_rate=0.05,
    population_size=16,
    eval_episodes=4,
    meta_hidden_sizes=(32,),
    meta_rnn_hidden_size=32,
    total_timesteps=100 * 16 * 4 * 152 * 16,
)
# The same with Pax's ipditm/train_gs and ipditm/train_shaper networks: the CNN on the view for the
# meta-agent (its features straight into the policy and value layers; Shaper: into a 32-unit GRU)
# and for the co-player (PPO_memory: the CNN, an 8-unit GRU, 8-unit tanh policy and value layers);
# 2 minibatches of the co-player's 4 envs (whole inner episodes).
_IN_THE_MATRIX_CNN = dataclasses.replace(
    _IN_THE_MATRIX,
    torso="cnn",
    meta_torso="cnn",
    meta_hidden_sizes=(),
    co_player_recurrent=True,
    co_player_rnn_hidden_size=8,
    hidden_sizes=(8,),
    num_minibatches=2,
)
PRESETS["meta_es"].update(
    {
        "good_shepherd_v_ppo_coin_game": _COIN_GAME,
        "shaper_v_ppo_coin_game": dataclasses.replace(
            _COIN_GAME,
            strategy="Open_ES",
            sigma_init=0.1,
            es_learning_rate=0.05,
            meta_recurrent=True,
            meta_hidden_sizes=(16,),
        ),
        "good_shepherd_v_ppo_in_the_matrix": _IN_THE_MATRIX,
        "shaper_v_ppo_in_the_matrix": dataclasses.replace(_IN_THE_MATRIX, meta_recurrent=True),
        "good_shepherd_v_ppo_in_the_matrix_cnn": _IN_THE_MATRIX_CNN,
        "shaper_v_ppo_in_the_matrix_cnn": dataclasses.replace(
            _IN_THE_MATRIX_CNN, meta_recurrent=True, meta_rnn_hidden_size=32
        ),
    }
)
# Roles (Pax's EvoRunnerNRoles): self-play on the IPD (the meta-agent in both seats, its fitness
# both seats' mean: nothing else learns, so one inner episode per outer episode; 100 generations),
# and Pax's multiplayer_ipd/3pl_2shap_ipd on the 3-player tensor game: a Shaper (GRU) meta-agent
# in two seats against a PPO_memory co-player in the third (Pax's 100-round inner episodes at the
# IPD presets' smaller scale: 20 rounds, 48 per outer episode, 100 generations).
_THREE_PLAYERS = 16 * 4 * 20 * 48
PRESETS["meta_es"].update(
    {
        "good_shepherd_self_play": MetaConfig(
            env_id=_IPD, meta_roles=2, num_outer_steps=1, total_timesteps=100 * 16 * 4 * 20
        ),
        "shaper_2_roles_v_ppo_3p": MetaConfig(
            env_id="IteratedTensorGame-v0",
            num_players=3,
            meta_roles=2,
            meta_recurrent=True,
            meta_hidden_sizes=(16,),
            co_player_recurrent=True,
            learning_rate=0.05,
            strategy="Open_ES",
            sigma_init=0.1,
            es_learning_rate=0.05,
            total_timesteps=100 * _THREE_PLAYERS,
        ),
    }
)
# Annealed self-play (Pax's self_play_anneal, which its rice/shaper_v_ppo experiment uses on
# Rice-N, not an env lamella has): the same Shaper and PPO_memory co-players on the 3-player IPD,
# the Shaper's seat count drawn every generation, from one seat at the start to mostly all three
# at the end; evaluated in one seat against two learners.
PRESETS["meta_es"]["shaper_v_ppo_3p_self_play_anneal"] = dataclasses.replace(
    PRESETS["meta_es"]["shaper_2_roles_v_ppo_3p"], meta_roles=1, self_play_anneal=True
)
PRESETS["meta_es"]["CoinGame-v0"] = PRESETS["meta_es"]["shaper_v_ppo_coin_game"]
PRESETS["meta_es"]["IPDInTheMatrix-v0"] = PRESETS["meta_es"]["shaper_v_ppo_in_the_matrix"]

#: ``lamella train shaping`` (entry point ``shaping = "lamella.marl.shaping.presets:SHAPING"``).
SHAPING = Algorithm(ShapingConfig, make_shaping_runner, PRESETS["shaping"])
#: ``lamella train mfos_es`` (entry point ``mfos_es = "lamella.marl.shaping.presets:MFOS_ES"``).
MFOS_ES = Algorithm(MetaESConfig, make_meta_es_runner, PRESETS["mfos_es"])
#: ``lamella train mfos_rl`` (entry point ``mfos_rl = "lamella.marl.shaping.presets:MFOS_RL"``).
MFOS_RL = Algorithm(MFOSConfig, make_mfos_runner, PRESETS["mfos_rl"])


# ``lamella train lola``: DiCE-LOLA and the naive sample-based learner with tabular memory-one
# policies on the finite IPD (:mod:`lamella.marl.shaping.dice`); 200 updates of 256 episodes of
# 50 rounds each (the budget counts every sampled batch: one shared, one more per LOLA agent).
_UPDATES, _BATCH_STEPS = 200, 256 * 50
PRESETS["lola"] = {
    "lola_v_lola": DiceConfig(agents=("lola", "lola"), total_timesteps=_UPDATES * 3 * _BATCH_STEPS),
    "nl_v_nl": DiceConfig(agents=("naive", "naive"), total_timesteps=_UPDATES * _BATCH_STEPS),
    "lola_v_nl": DiceConfig(agents=("lola", "naive"), total_timesteps=_UPDATES * 2 * _BATCH_STEPS),
    "lola_v_tft": DiceConfig(agents=("lola", "tit_for_tat"), total_timesteps=_UPDATES * 2 * _BATCH_STEPS),
}
PRESETS["lola"][_IPD] = PRESETS["lola"]["lola_v_lola"]
#: ``lamella train lola`` (entry point ``lola = "lamella.marl.shaping.presets:LOLA"``).
LOLA = Algorithm(DiceConfig, make_dice_runner, PRESETS["lola"])
#: ``lamella train meta_es`` (entry point ``meta_es = "lamella.marl.shaping.presets:META_ES"``).
META_ES = Algorithm(MetaConfig, make_meta_runner, PRESETS["meta_es"])
