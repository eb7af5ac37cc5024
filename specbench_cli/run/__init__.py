"""`specbench run`: planning method instances (NAME@N), the fair paired loop, resume."""
