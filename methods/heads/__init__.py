"""Draft heads on the frozen target (Medusa, EAGLE, KOALA): the modules, their trees, checkpoint I/O and the shared method base."""
