"""From records to verdicts: the one evidence stage (evidence.py), statistics, checks, typed findings and the
exit-code policy. Computes; never prints or words.
"""
