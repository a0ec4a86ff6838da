# CUDA backend: PUFF_CUDA=AUTO|ON|OFF. Sets PUFFADV_HAS_CUDA (0/1).
# (Placeholder until the CUDA backend lands: AUTO and OFF build without it.)
set(PUFFADV_HAS_CUDA 0)
if(PUFF_CUDA STREQUAL "ON")
  message(FATAL_ERROR "PUFF_CUDA=ON: the CUDA backend is not part of this build yet")
endif()
