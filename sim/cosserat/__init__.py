"""Cosserat macro-continuous robots (Boyer, Ali & Porez, T-RO 2012): strain-parametrised rods, their internal
wrench along X, the dynamic (free head) and contact-driven kinematic algorithms. docs/cosserat.md."""
