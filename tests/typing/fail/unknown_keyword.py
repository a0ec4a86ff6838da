# expect: call-arg
# A misspelt keyword argument (gama) is caught before the code runs.
import numpy as np

import puffadv

x = np.zeros((4, 8), np.float32)
puffadv.compute_puff_advantage(x, x, x, x, gama=0.99)
