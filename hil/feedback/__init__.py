"""The closed loop (docs/closed-loop.md): ``mms serve --feedback RIG`` feeds the rig's measurements back into the
simulation."""
