# SPDX-License-Identifier: Apache-2.0
# Drops the dangling "xtl" link item that Debian's xsimd 8.1 package exports.
#
# Debian 12 builds xsimd with XSIMD_ENABLE_XTL_COMPLEX and its xsimdTargets.cmake lists "xtl" in
# INTERFACE_LINK_LIBRARIES, but the package neither depends on xtl nor finds it. As a plain name
# it turns into -lxtl and every link fails. xtl matters only for xtl::xcomplex, which edgellm
# never uses, so when no xtl target exists the item is removed. Upstream packages are untouched.
if(TARGET xsimd AND NOT TARGET xtl)
  get_target_property(_edgellm_xsimd_imported xsimd IMPORTED)
  get_target_property(_edgellm_xsimd_links xsimd INTERFACE_LINK_LIBRARIES)
  if(_edgellm_xsimd_imported AND _edgellm_xsimd_links AND "xtl" IN_LIST _edgellm_xsimd_links)
    list(REMOVE_ITEM _edgellm_xsimd_links xtl)
    set_target_properties(xsimd PROPERTIES INTERFACE_LINK_LIBRARIES "${_edgellm_xsimd_links}")
  endif()
  unset(_edgellm_xsimd_imported)
  unset(_edgellm_xsimd_links)
endif()
