import pytest

import lamella.envs as le


def test_unknown_id_lists_close_matches():
    with pytest.raises(KeyError, match="CartPole-v1"):
        le.make("CartPol-v1")


def test_unknown_override_lists_params():
    with pytest.raises(TypeError, match="gravity"):
        le.make("CartPole-v1", gravty=3.0)
