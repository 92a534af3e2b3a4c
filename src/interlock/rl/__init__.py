"""Reinforcement learning on verified tasks: the agent judge as the reward."""
