"""Ring attention's framework-free parts, shared by the JAX and torch front-ends.

:mod:`attnkit.ring.plan`: who holds which positions in a ring, and which (query piece,
key piece) pairs do work; :mod:`attnkit.ring.backward`: the backward pass of one key
block from the whole call's output and lse (:func:`partial_attention_vjp`).
"""
