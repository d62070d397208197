"""Time limits that catch a converted loop that never ends, without failing a test only
because the machine is loaded.

A loop that never ends spins: it burns CPU. So the limit is on the process's CPU time
(``ITIMER_PROF``: all its threads), at ``CPU_PER_S`` CPU seconds per second of the limit
(torch's 2 threads) — never stricter than a wall-clock limit of the same seconds. A wait
that never ends burns none: a wall-clock alarm ``WALL_FACTOR`` times longer catches it.
On a loaded machine a test gets the wall time it needs; a hang still ends.
"""
import signal

CPU_PER_S = 2
WALL_FACTOR = 6


def install(handler):
    """Route both limits to ``handler``; returns what ``restore`` needs."""
    return signal.signal(signal.SIGALRM, handler), signal.signal(signal.SIGPROF, handler)


def arm(seconds: int) -> None:
    signal.setitimer(signal.ITIMER_PROF, CPU_PER_S * seconds)
    signal.alarm(WALL_FACTOR * seconds)


def disarm() -> None:
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.alarm(0)


def restore(old) -> None:
    disarm()
    signal.signal(signal.SIGALRM, old[0])
    signal.signal(signal.SIGPROF, old[1])
