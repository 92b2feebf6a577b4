"""Every process git-parallel starts and stops, in one place.

- ``env``: the one environment scrub (what an agent, a gate or our own git
  must not inherit).
- ``supervise``: starting a command in its own process group, the one
  "cannot start" message, the one kill path (SIGTERM, ``KILL_GRACE``,
  SIGKILL), waits that leave the leader unreaped, and stop signals as a flag.
- ``watchdog``: a forked helper that stops the groups still running if the
  verb that started them is killed outright.
- ``reaper``: what leaves its group (scope sweeps, the subreaper).
- ``slots``: the repository-wide cap on commands at once, and instance claims.

``run`` (agents) and ``check``/``merge``/``judge`` (gates) differ only in
what they do around a process, never in how it is started or stopped.
"""
