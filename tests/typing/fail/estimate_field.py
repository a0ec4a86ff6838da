# expect: attr-defined
# puffadv.Estimate is a NamedTuple with known fields: a misspelt one is caught.
import puffadv


def total(estimate: puffadv.Estimate) -> object:
    return estimate.advantage
