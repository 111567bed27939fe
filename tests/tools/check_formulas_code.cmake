# docs/formulas.md names the code of each formula (cmake -P, run by CTest as docs.formulas_code):
# a paragraph that starts "Code:" lists references, each one or more names and the file that
# holds them,
#
#   Code: `kv::vector_bytes`, `kv::scales_per_vector` (src/kv/cache_format.cpp);
#   `kv::attention_spec` (src/kv/cache_spec.cpp).
#
# A name is its module's namespace and the function or class (`kv::compute_footprint`), or a
# class and its member (`roofline::StepCost::experts`). It holds when the file exists, opens its
# module's namespace (namespace kvcalc::<module>) and defines or declares the name: the name
# followed by `(` (not as a call through `.` or `->`), or `class NAME` / `struct NAME`; a member
# as `Class::member(`, or inside a file that declares `class Class` / `struct Class`. Every
# section (`## ` heading) has at least one such paragraph.
# -DSOURCE_DIR is the repository root; -DDOC another file to check (default docs/formulas.md).

cmake_minimum_required(VERSION 3.20)

if(NOT DOC)
  set(DOC "${SOURCE_DIR}/docs/formulas.md")
endif()
file(RELATIVE_PATH doc_name "${SOURCE_DIR}" "${DOC}")
file(READ "${DOC}" text)
# One list item per line: characters that CMake's lists treat specially leave first.
string(REPLACE "\\" "/" text "${text}")
string(REPLACE ";" "," text "${text}")
string(REPLACE "[" "(" text "${text}")
string(REPLACE "]" ")" text "${text}")
string(REPLACE "\n" ";" lines "${text}")

set(identifier "[A-Za-z_][A-Za-z0-9_]*")
set(failures "")
set(references 0)
set(paragraphs 0)

# Whether `content` (a file, with a newline in front) defines or declares `name`: the name
# followed by `(`, not called through `.` or `->`, or a class or struct of that name.
function(declares content name out)
  if(content MATCHES "[^.>A-Za-z0-9_~]${name} *\\(" OR
     content MATCHES "(class|struct) +${name}[^A-Za-z0-9_]")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# Checks one reference; appends to `failures` in the caller.
function(check_reference symbol path line)
  set(where "${doc_name}:${line}: `${symbol}` (${path})")
  if(NOT symbol MATCHES "^(${identifier})(::${identifier})+$")
    set(failures "${failures}  ${where}: not a name of the form module::function\n" PARENT_SCOPE)
    return()
  endif()
  if(NOT EXISTS "${SOURCE_DIR}/${path}" OR IS_DIRECTORY "${SOURCE_DIR}/${path}")
    set(failures "${failures}  ${where}: no such file\n" PARENT_SCOPE)
    return()
  endif()
  file(READ "${SOURCE_DIR}/${path}" content)
  set(content "\n${content}")
  string(REPLACE "::" ";" parts "${symbol}")
  list(GET parts 0 module)
  list(GET parts -1 name)
  list(LENGTH parts count)
  if(NOT content MATCHES "namespace kvcalc::${module}[ :{\n]")
    set(failures "${failures}  ${where}: the file is not in namespace kvcalc::${module}\n"
        PARENT_SCOPE)
    return()
  endif()
  set(found FALSE)
  if(count GREATER 2)
    math(EXPR owner_index "${count} - 2")
    list(GET parts ${owner_index} owner)
    if(content MATCHES "[^A-Za-z0-9_]${owner}::${name} *\\(")
      set(found TRUE)
    elseif(content MATCHES "(class|struct) +${owner}[^A-Za-z0-9_]")
      declares("${content}" "${name}" found)
    endif()
  else()
    declares("${content}" "${name}" found)
  endif()
  if(NOT found)
    set(failures "${failures}  ${where}: the file neither defines nor declares `${name}`\n"
        PARENT_SCOPE)
  endif()
endfunction()

# The Code paragraphs, each with the line it starts on, and the sections without one.
set(number 0)
set(section "")
set(section_has_code TRUE)
set(paragraph "")
set(paragraph_line 0)
set(bodies "")
foreach(line IN LISTS lines)
  math(EXPR number "${number} + 1")
  if(paragraph_line GREATER 0 AND (line STREQUAL "" OR line MATCHES "^(#|Code: )"))
    list(APPEND bodies "${paragraph_line}|${paragraph}")
    set(paragraph_line 0)
  elseif(paragraph_line GREATER 0)
    string(APPEND paragraph " ${line}")
  endif()
  if(line MATCHES "^## ")
    if(NOT section STREQUAL "" AND NOT section_has_code)
      string(APPEND failures
             "  ${doc_name}: section \"${section}\" names no code (no Code: line)\n")
    endif()
    string(REGEX REPLACE "^## " "" section "${line}")
    set(section_has_code FALSE)
  elseif(line MATCHES "^Code: ")
    string(REGEX REPLACE "^Code: " "" paragraph "${line}")
    set(paragraph_line ${number})
    set(section_has_code TRUE)
  endif()
endforeach()
if(paragraph_line GREATER 0)
  list(APPEND bodies "${paragraph_line}|${paragraph}")
endif()
if(NOT section STREQUAL "" AND NOT section_has_code)
  string(APPEND failures "  ${doc_name}: section \"${section}\" names no code (no Code: line)\n")
endif()

foreach(entry IN LISTS bodies)
  string(REGEX MATCH "^([0-9]+)\\|(.*)$" _ "${entry}")
  set(line "${CMAKE_MATCH_1}")
  set(body "${CMAKE_MATCH_2}")
  math(EXPR paragraphs "${paragraphs} + 1")
  # A reference: one or more `names`, then the file in parentheses.
  string(REGEX MATCHALL "`[^`]+`(, `[^`]+`)* \\([^()` ]+\\)" groups "${body}")
  string(REGEX MATCHALL "`[^`]+`" quoted "${body}")
  list(LENGTH quoted quoted_count)
  set(named 0)
  if(NOT groups)
    string(APPEND failures
           "  ${doc_name}:${line}: a Code: line that names nothing as `name` (file)\n")
    continue()
  endif()
  foreach(group IN LISTS groups)
    string(REGEX MATCH "\\(([^()` ]+)\\)$" _ "${group}")
    set(path "${CMAKE_MATCH_1}")
    string(REGEX MATCHALL "`[^`]+`" names "${group}")
    foreach(quoted_name IN LISTS names)
      string(REPLACE "`" "" symbol "${quoted_name}")
      math(EXPR named "${named} + 1")
      math(EXPR references "${references} + 1")
      check_reference("${symbol}" "${path}" "${line}")
    endforeach()
  endforeach()
  if(NOT named EQUAL quoted_count)
    string(APPEND failures "  ${doc_name}:${line}: a name in a Code: line without its file: "
                           "write `module::name` (path/to/file.cpp)\n")
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "${doc_name} names code that is not where it says:\n${failures}")
endif()
message(STATUS "${doc_name}: ${references} references in ${paragraphs} Code: lines, each "
               "defined or declared where it says")
