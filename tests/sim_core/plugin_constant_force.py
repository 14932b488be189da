"""The example force plug-in of docs/extending.md: a constant force (N, world frame) at a point (m, body frame) of
each listed body. One file, registered by name on import; nothing in sim/ names it."""
import numpy as np

from sim.forces import ForceModel
from sim.plugins import ParamLayout, float_matrix, int_vector, register_force_kernel

LAYOUT = ParamLayout(floats=(("force", 2), ("point", 2)), ints=(("bodies", 1),))
P = LAYOUT.fields


def constant_force_kernel(t, g, eta, f_ext, M_added, fpar, ipar):
    bodies, force, point = int_vector(ipar, P.bodies), float_matrix(fpar, ipar, P.force), float_matrix(fpar, ipar, P.point)  # noqa: E501
    for i in range(bodies.shape[0]):
        j = bodies[i]
        f = g[j, 0, :3] * force[i, 0] + g[j, 1, :3] * force[i, 1] + g[j, 2, :3] * force[i, 2]   # R^T F: body frame
        f_ext[j, :3] += f
        f_ext[j, 3:] += np.cross(point[i], f)                                                   # moment about O_j


register_force_kernel("constant_force", LAYOUT, constant_force_kernel)


class ConstantForce(ForceModel):
    name = fused_kernel = "constant_force"

    def __init__(self, bodies, force, point):
        self.pack(bodies=np.reshape(bodies, -1), force=np.reshape(force, (-1, 3)), point=np.reshape(point, (-1, 3)))
