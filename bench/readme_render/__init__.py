"""Renderers of README passages from bench/results/ files, registered in bench/readme_sections.py."""
