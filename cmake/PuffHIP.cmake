# HIP backend: PUFF_HIP=AUTO|ON|OFF. Sets PUFFADV_HAS_HIP (0/1).
# (Placeholder until the HIP backend lands: AUTO and OFF build without it.)
set(PUFFADV_HAS_HIP 0)
if(PUFF_HIP STREQUAL "ON")
  message(FATAL_ERROR "PUFF_HIP=ON: the HIP backend is not part of this build yet")
endif()
