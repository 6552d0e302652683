#include <cases.hpp>

#include <rdmakit/connection_manager.hpp>

void f() {
#ifndef RDMAKIT_CF_CONTROL
  cm_listener<B> l;  // archetype_backend has no connection manager
#else
  cm_listener<rdmakit::archetype_cm_backend> l;
#endif
  (void)l;
}
