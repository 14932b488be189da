"""The integrators a Simulation runs, by name, apart from their kernels (sim/integrators.py): a tool that only checks
a config's names (a rig file read by `mms validate` or `mms export`) does not load numba."""

#: the integrators a Simulation runs, by name (sim/simulation.py): the one list every config and option checks
INTEGRATORS = ("rk4", "rk45", "rosw")
