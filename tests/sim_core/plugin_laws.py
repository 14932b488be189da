"""The example law plug-ins of docs/extending.md: a motion law (an exponential approach to a target) and a joint law
(a hardening spring). One file, registered by name on import; nothing in sim/ names them."""
import math

from sim.laws import JointLaw, MotionLaw
from sim.plugins import ParamLayout, float_scalar, register_joint_law, register_motion_law

APPROACH_LAYOUT = ParamLayout(floats=(("target", 0), ("tau", 0)))
A = APPROACH_LAYOUT.fields


def approach_kernel(t, fpar, ipar):
    """r = target (1 - exp(-t / tau)) (rad or m; tau s) and its two derivatives."""
    target, tau = float_scalar(fpar, ipar, A.target), float_scalar(fpar, ipar, A.tau)
    e = math.exp(-t / tau)
    return target * (1.0 - e), target * e / tau, -target * e / (tau * tau)


register_motion_law("exponential_approach", APPROACH_LAYOUT, approach_kernel)


class ExponentialApproach(MotionLaw):
    fused_kernel = "exponential_approach"

    def __init__(self, target, tau):
        self.pack(target=target, tau=tau)


SPRING_LAYOUT = ParamLayout(floats=(("k", 0), ("k3", 0), ("mu", 0)))
S = SPRING_LAYOUT.fields


def hardening_kernel(t, r, r_d, ref_r, ref_rd, ref_rdd, fpar, ipar):
    """tau = -k r - k3 r^3 - mu r_d (N m; k N m/rad, k3 N m/rad^3, mu N m s/rad); no reference motion."""
    return (-float_scalar(fpar, ipar, S.k) * r - float_scalar(fpar, ipar, S.k3) * r * r * r
            - float_scalar(fpar, ipar, S.mu) * r_d)


register_joint_law("hardening_spring", SPRING_LAYOUT, hardening_kernel)


class HardeningSpring(JointLaw):
    fused_kernel = "hardening_spring"

    def __init__(self, k, k3, mu):
        self.pack(k=k, k3=k3, mu=mu)
