"""Words and layout: console tables, Markdown, JSON, JUnit, GitHub annotations, the HTML report and its figures.
Renders what the judge found; computes nothing.
"""
