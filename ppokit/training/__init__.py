"""The trainer's phases, each one call: batch building, forward passes, advantages, updates.

`ppokit.session.Session` strings them together; `run_ppo.py` only calls `Session.train()`.
"""
