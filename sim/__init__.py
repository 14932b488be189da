"""The Mobile Multibody System simulator: spatial algebra, models, the hybrid Newton-Euler algorithm,
force models, integrators, robot builders and the real-time server."""
