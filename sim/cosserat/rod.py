"""The Cosserat rod and its passes along X (Boyer, Ali & Porez, T-RO 2012, sections 2-3).

Notation (the paper's; docs/cosserat.md): X in [0, l] is the material abscissa, X = 0 the head (reference body);
``g(X)`` (4, 4) the section's pose, ``eta = (V, Omega)`` (6,) its twist and ``etad`` its acceleration, frame X;
``xi = (Gamma, K)`` the strain; ``Lam = (N, C)`` the internal wrench on [0, X] from (X, l], frame X, N and N m.
``k(X) = g(X)^-1 g_o``: ``Ad(k)`` maps a head twist to frame X, ``Ad(k)^T`` a frame-X wrench to the head.

The X-integrations are written in the head frame, where the paper's linear ODEs become quadratures:
``eta' = -ad_xi eta + xi_t`` is ``(Ad(k)^-1 eta)' = Ad(k)^-1 xi_t``, and (13)
``Lam' = Mc etad - ad_eta^T Mc eta + ad_xi^T Lam - Fb`` is ``(Ad(k)^T Lam)' = Ad(k)^T (Mc etad - ad_eta^T Mc eta - Fb)``.
The pose g is integrated by the 4th-order Magnus scheme and the quadratures by Simpson's rule on the same
nodes, so the head dynamics ``Mo etad_o = Fo`` (Block 1) and the wrench's closure ``Lam(l) = F+`` (Block 2) are
the same sums: closure holds to rounding. Point wrenches split X into segments (a node on each side).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import lie
from .strains import StrainField

#: Gauss points of the 4th-order Magnus step, as fractions of the step (1/2 -/+ sqrt(3)/6).
MAGNUS_NODES = (0.5 - np.sqrt(3.0) / 6.0, 0.5 + np.sqrt(3.0) / 6.0)
#: Two contact abscissae closer than this (m) are one cut of the X grid (a segment of zero length has no nodes).
SAME_ABSCISSA_M = 1e-12


@dataclass(frozen=True)
class Rod:
    """The model of a rod: length l (m), Mc (6,) the cross-section inertia per unit X
    ``(rhoA, rhoA, rhoA, rho(I_Y + I_Z), rho I_Y, rho I_Z)`` (kg/m, kg m), gravity (3,) world m/s^2,
    n_X the number of X steps over the whole length (even; each segment between cuts gets its share)."""
    length: float
    Mc: np.ndarray
    gravity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    n_X: int = 200

    @property
    def mass(self) -> float:
        return float(self.Mc[0] * self.length)


def round_rod(length: float, radius: float, density: float, *, gravity=(0.0, 0.0, 0.0), n_X: int = 200) -> Rod:
    """A uniform rod of round section: A = pi r^2, I_Y = I_Z = pi r^4 / 4 (m^2, m^4), density kg/m^3."""
    area, second = np.pi * radius ** 2, np.pi * radius ** 4 / 4.0
    Mc = density * np.array([area, area, area, 2.0 * second, second, second])
    return Rod(float(length), Mc, np.asarray(gravity, dtype=float), int(n_X))


@dataclass
class Nodes:
    """The X grid of one instant and the strain-dependent geometry on it (N nodes; a cut has a node each side).

    X (N,) m; segments: [(start, stop)] index ranges, one per segment between cuts; xi, xi_X, xi_t, xi_tt (N, 6);
    g_rel (N, 4, 4) pose of section X in the head frame (``g_o^-1 g = k^-1``); Adk (N, 6, 6) = Ad(k),
    Adk_inv (N, 6, 6) = Ad(k)^-1 = Ad(g_rel)."""
    X: np.ndarray
    segments: list[tuple[int, int]]
    xi: np.ndarray
    xi_X: np.ndarray
    xi_t: np.ndarray
    xi_tt: np.ndarray
    g_rel: np.ndarray
    Adk: np.ndarray
    Adk_inv: np.ndarray

    def at(self, X: float, side: str = "left") -> int:
        """Index of the node at abscissa X (the left or right node of a cut)."""
        # X is nondecreasing: the nodes within SAME_ABSCISSA_M of X are one run, found by bisection
        first = int(np.searchsorted(self.X, X - SAME_ABSCISSA_M, side="left"))
        last = int(np.searchsorted(self.X, X + SAME_ABSCISSA_M, side="right")) - 1
        if first > last:
            raise ValueError(f"X = {X} m is not a node (cuts must be given to build_nodes)")
        return first if side == "left" else last


def build_nodes(rod: Rod, field: StrainField, t: float, cuts=(), upto: float | None = None) -> Nodes:
    """Kinematics pass, pose part: the grid split at ``cuts`` (m, inside (0, l)), the strain at every node and
    ``g_rel`` by Magnus-4 from the head (``g' = g hat(xi)``). ``upto``: stop at this X (a Block 0 needs [0, C])."""
    end = rod.length if upto is None else float(upto)
    points = sorted({0.0, end, *(float(c) for c in cuts if SAME_ABSCISSA_M < c < end - SAME_ABSCISSA_M)})
    xs, segments, start = [], [], 0
    for a, b in zip(points[:-1], points[1:]):
        steps = max(2, 2 * int(np.ceil(rod.n_X * (b - a) / rod.length / 2.0)))     # even: Simpson's rule
        xs.append(np.linspace(a, b, steps + 1))
        segments.append((start, start + steps + 1))
        start += steps + 1
    if not xs:                                         # upto = 0: the head alone
        xs, segments = [np.zeros(1)], [(0, 1)]
    X = np.concatenate(xs)
    sample = field(X, t)
    h = np.diff(X)
    gauss = [field(X[:-1] + c * h, t).xi for c in MAGNUS_NODES]
    W = (0.5 * h[:, None] * (gauss[0] + gauss[1])
         + (np.sqrt(3.0) / 12.0) * (h ** 2)[:, None] * lie.mv(lie.ad(gauss[0]), gauss[1]))
    g_rel = lie.prefix_products(lie.exp_se3(W))
    return Nodes(X, segments, *sample, g_rel, lie.Ad_inv(g_rel), lie.Ad(g_rel))


def cumulative_simpson(nodes: Nodes, f: np.ndarray, jumps: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """``int_0^X f dX`` at every node (N, ...), Simpson's rule per segment, continuous across cuts, plus
    ``jumps`` {segment index: value added at that segment's first node} (a point load's jump)."""
    out = np.zeros_like(f)
    carry = np.zeros(f.shape[1:])
    for s, (a, b) in enumerate(nodes.segments):
        if jumps and s in jumps:
            carry = carry + jumps[s]
        seg, x = f[a:b], nodes.X[a:b]
        out[a] = carry
        if b - a > 1:
            h = (x[-1] - x[0]) / (b - a - 1)
            inc = np.empty((b - a - 1,) + f.shape[1:])
            inc[0::2] = h / 12.0 * (5.0 * seg[0:-1:2] + 8.0 * seg[1::2] - seg[2::2])
            inc[1::2] = h / 12.0 * (-seg[0:-2:2] + 8.0 * seg[1:-1:2] + 5.0 * seg[2::2])
            out[a + 1:b] = carry + np.cumsum(inc, axis=0)
        carry = out[b - 1]
    return out


def twists(nodes: Nodes, eta_o: np.ndarray) -> np.ndarray:
    """Kinematics pass, velocity part: eta (N, 6) frame X from the head twist eta_o (6,):
    ``eta = Ad(k) (eta_o + int Ad(k)^-1 xi_t dX)``."""
    moved = cumulative_simpson(nodes, lie.mv(nodes.Adk_inv, nodes.xi_t))
    return lie.mv(nodes.Adk, eta_o + moved)


def accelerations(nodes: Nodes, eta: np.ndarray, etad_o: np.ndarray) -> np.ndarray:
    """Kinematics pass, acceleration part: etad (N, 6) frame X from the head acceleration etad_o (6,), with
    ``etad' = -ad_xi etad - ad_{xi_t} eta + xi_tt``; etad_o = 0 gives the paper's zeta."""
    source = nodes.xi_tt - lie.mv(lie.ad(nodes.xi_t), eta)
    return lie.mv(nodes.Adk, etad_o + cumulative_simpson(nodes, lie.mv(nodes.Adk_inv, source)))


def distributed_load(rod: Rod, nodes: Nodes, g_o: np.ndarray) -> np.ndarray:
    """Fb (N, 6) frame X, N/m: gravity ``(rhoA R^T g_w, 0)``, R the section's world rotation."""
    R = g_o[:3, :3] @ nodes.g_rel[:, :3, :3]
    Fb = np.zeros((nodes.X.size, 6))
    Fb[:, :3] = rod.Mc[0] * np.einsum("nji,j->ni", R, rod.gravity)
    return Fb


@dataclass
class Block1:
    """Block 1 of Fig. 2/5 at one instant: eta, zeta (N, 6) frame X; Mo (6, 6) head frame, kg and kg m^2;
    Fo (6,) head frame, N and N m (without the contact reaction: ``Fc = Mo etad_o - Fo``); Fb (N, 6)."""
    eta: np.ndarray
    zeta: np.ndarray
    Mo: np.ndarray
    Fo: np.ndarray
    Fb: np.ndarray


def block1(rod: Rod, nodes: Nodes, g_o: np.ndarray, eta_o: np.ndarray, F_minus=None, F_plus=None) -> Block1:
    """``Mo = int Ad(k)^T Mc Ad(k) dX``, ``Fo = F- + Ad(k(l))^T F+ + int Ad(k)^T (ad_eta^T Mc eta + Fb - Mc zeta)``
    (eqs. 18-21, with the sign of F- that fits (14)); F-, F+ (6,) external wrenches at X = 0, l (frames 0, l)."""
    eta = twists(nodes, eta_o)
    zeta = accelerations(nodes, eta, np.zeros(6))
    Fb = distributed_load(rod, nodes, g_o)
    Mc = rod.Mc
    momentum = Mc * eta
    integrand = lie.mtv(nodes.Adk, lie.mtv(lie.ad(eta), momentum) + Fb - Mc * zeta)
    inertia = np.einsum("nji,j,jk->nik", nodes.Adk, Mc, np.eye(6))
    inertia = np.einsum("nij,njk->nik", inertia, nodes.Adk)
    Mo = cumulative_simpson(nodes, inertia)[-1]
    Fo = cumulative_simpson(nodes, integrand)[-1]
    if F_minus is not None:
        Fo = Fo + F_minus
    if F_plus is not None:
        Fo = Fo + nodes.Adk[-1].T @ F_plus
    return Block1(eta, zeta, Mo, Fo, Fb)


@dataclass
class Block2:
    """Block 2 at one instant: etad (N, 6) frame X, m/s^2 and rad/s^2; Lam (N, 6) frame X, N and N m (at a
    cut, the left node holds Lam(C-), the right one Lam(C+)); closure: ``|Lam(l) - F+| / max|Lam|``."""
    etad: np.ndarray
    Lam: np.ndarray
    closure: float


def block2(rod: Rod, nodes: Nodes, first: Block1, etad_o: np.ndarray, point_wrenches=(), F_minus=None,
           F_plus=None) -> Block2:
    """Internal wrench from ``Lam(0) = -F-`` by (13), with ``Lam(C+) = Lam(C-) - F_i`` at each point wrench
    ``(C_i, F_i)`` (C_i a cut of ``nodes``, F_i (6,) frame C_i); the closure compares Lam(l) with F+."""
    etad = lie.mv(nodes.Adk, etad_o) + first.zeta
    Mc = rod.Mc
    source = Mc * etad - lie.mtv(lie.ad(first.eta), Mc * first.eta) - first.Fb
    jumps: dict[int, np.ndarray] = {}
    start = np.zeros(6) if F_minus is None else -np.asarray(F_minus, dtype=float)
    for C, F in point_wrenches:
        if C <= SAME_ABSCISSA_M:
            start = start - F
            continue
        j = nodes.at(C, "right")
        segment = next(s for s, (a, _) in enumerate(nodes.segments) if a == j)
        jumps[segment] = jumps.get(segment, np.zeros(6)) - nodes.Adk[j].T @ F
    L = start + cumulative_simpson(nodes, lie.mtv(nodes.Adk, source), jumps)     # Ad(k)^T Lam, head frame
    Lam = lie.mtv(nodes.Adk_inv, L)
    target = np.zeros(6) if F_plus is None else np.asarray(F_plus, dtype=float)
    scale = max(float(np.max(np.abs(Lam))), float(np.max(np.abs(target))), np.finfo(float).tiny)
    return Block2(etad, Lam, float(np.max(np.abs(Lam[-1] - target))) / scale)


def momentum(rod: Rod, nodes: Nodes, eta: np.ndarray) -> np.ndarray:
    """The rod's momentum (6,) about the head, head frame: ``int Ad(k)^T Mc eta dX`` (kg m/s, kg m^2/s)."""
    return cumulative_simpson(nodes, lie.mtv(nodes.Adk, rod.Mc * eta))[-1]
