"""Sensors of flowctl: wait for a condition in the control plane (poke or deferred)."""
