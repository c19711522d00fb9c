"""Drivers: programs that run the whole loop for a purpose, above everything they drive.

- `simulate`  simulated users teach a live server; the personalization score and curves.
- `agent`     plays environment episodes through the policy API and trains on step-wise
              advantages (`rollout` plays one episode, `agent_server` runs the server
              beside it).
"""
