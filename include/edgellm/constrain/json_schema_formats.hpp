// SPDX-License-Identifier: Apache-2.0
// JSON Schema's string formats as GBNF, for constrain/json_schema.hpp (a base of its
// SchemaCompiler): date, time and date-time (RFC 3339 shapes, each month's days, February's to
// the 28th), uuid, and email (a dot-atom local part @ a dotted host).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace edgellm::constrain::detail {

// The format rules of "string" schemas. Compiler (SchemaCompiler) derives from it and makes it a
// friend: each rule is defined once, in its rule list, as a primitive is.
template <class Compiler>
class SchemaFormats {
 protected:
  // The inside of a formatted string, or "" for an unknown format.
  std::string format_rule(const std::string& f) {
    static const std::map<std::string, std::string> bodies = {
        // Days by month; February to the 28th (a leap day needs the year's arithmetic).
        {"format-date",
         "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
         "\"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
         "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )"},
        {"format-time",
         "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? "
         "( [zZ] | [+\\x2D] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
        {"format-date-time", "format-date [tT] format-time"},
        {"format-uuid",
         "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
         "[0-9a-fA-F]{12}"},
        {"format-email-atom", "[A-Za-z0-9!#$%&'*+/=?\\x5E_`{|}~\\x2D]+"},
        {"format-email-label", "[A-Za-z0-9]+ ( \"-\"+ [A-Za-z0-9]+ )*"},
        {"format-email",
         "format-email-atom ( \".\" format-email-atom )* \"@\" format-email-label "
         "( \".\" format-email-label )+"},
    };
    static const std::map<std::string, std::vector<std::string>> uses = {
        {"date", {"format-date"}},
        {"time", {"format-time"}},
        {"date-time", {"format-date", "format-time", "format-date-time"}},
        {"uuid", {"format-uuid"}},
        {"email", {"format-email-atom", "format-email-label", "format-email"}},
    };
    auto u = uses.find(f);
    if (u == uses.end()) return "";
    for (const auto& r : u->second) {
      if (compiler().prims_.insert(r).second) compiler().rules_.push_back({r, bodies.at(r)});
    }
    return u->second.back();
  }

 private:
  Compiler& compiler() { return static_cast<Compiler&>(*this); }
};

}  // namespace edgellm::constrain::detail
