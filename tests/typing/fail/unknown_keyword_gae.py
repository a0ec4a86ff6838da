# expect: call-arg
# A misspelt keyword argument (gama) of a plain (not overloaded) public function.
import numpy as np

import puffadv

x = np.zeros((4, 8), np.float32)
puffadv.gae(x, x, x > 0, last_value=x[:, 0], gama=0.99, time_axis=-1)
