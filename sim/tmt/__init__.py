"""A second dynamics engine: TMT linear-vector Lagrange equations (docs/tmt.md)."""
from .engine import TMTResult, kinetic_energy, mass_matrix_and_bias, tmt_dynamics, tree_kinematics

__all__ = ["TMTResult", "kinetic_energy", "mass_matrix_and_bias", "tmt_dynamics", "tree_kinematics"]
